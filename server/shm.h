// ShmRegistry: the POSIX shared-memory regions clients on the server's host registered
// (SharedMemoryService, proto/fresnel/v1/shm.proto), keyed by (ClientOf(context), name), and the
// resolver that turns an NdArray's ShmRef into bytes of a region (fresnel/v1/array_convert.h).
//
// Lifetime: a region is forgotten when its client unregisters it or after `ttl_s` without a
// request naming it (gRPC unary calls give no client-gone signal; expired regions are swept on
// every registry call). A request that resolved a region holds its mapping (ShmSpan::keepalive):
// the server unmaps it, and gives its bytes back to the --shm-bytes budget, after the last such
// request. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "fresnel/v1/array_convert.h"
#include "fresnel/v1/shm.pb.h"
#include "server/budget.h"
#include "server/device_pool.h"

namespace fresnel::server {

struct ShmRegistryOptions {
  int64_t cap_bytes = int64_t{8} << 30;  // --shm-bytes: what all regions may map together
  double ttl_s = 600;                    // --shm-ttl: idle time before a region is forgotten
  int max_regions = 4096;                // regions of all clients together
  // --staging-cache-bytes: staging buffers (RegisterRegion with an empty shm_name) whose region
  // was unregistered are kept, up to this many bytes, and handed to the next staging region
  // that fits (capacity in [size, 2 * size]) instead of a fresh mapping: no page faults, no
  // kernel zeroing, no munmap and no re-pinning per transfer. They stay counted against
  // cap_bytes while kept; a registration that would not fit drops them first. 0 = keep none.
  int64_t staging_cache_bytes = int64_t{4} << 30;
  // --pin-regions (on when the server has GPUs): page-lock every region (fresnel::PinHostMemory)
  // so host<->device copies from and to it are DMA. A region that cannot be pinned is used
  // unpinned (counted in pin_failures()).
  bool pin = false;
  std::function<Clock::time_point()> now;  // the clock (tests); empty = Clock::now
  // The server's CUDA devices as (ordinal, 16-byte UUID): where CUDA IPC regions may lie. Empty
  // (a CPU-only server): registering one is FAILED_PRECONDITION.
  std::vector<std::pair<int, std::string>> cuda_devices;
  // --overlap-chunk-bytes: handed to the direct path's IntoOptions (not used by the registry).
  int64_t overlap_chunk_bytes = int64_t{32} << 20;
};

// A region's bytes for the calls that take device memory too: `span.data` is a device pointer of
// CUDA ordinal `cuda_device` when that is >= 0 (a CUDA IPC region), host memory otherwise.
struct PlacedSpan {
  ShmSpan span;
  int cuda_device = -1;
};
using PlacedResolver = std::function<absl::StatusOr<PlacedSpan>(
    const v1::ShmRef& ref, int64_t nbytes, absl::string_view field)>;

class ShmRegistry {
 public:
  explicit ShmRegistry(ShmRegistryOptions options, Budget::Observer observer = nullptr);
  ~ShmRegistry();
  ShmRegistry(const ShmRegistry&) = delete;
  ShmRegistry& operator=(const ShmRegistry&) = delete;

  // Opens and maps request.shm_name for `client` (error codes: see shm.proto), or opens
  // request.cuda_ipc's handle on the server's device of that UUID (a CUDA IPC region: device
  // memory, not counted in --shm-bytes, which caps host mappings).
  absl::StatusOr<v1::SharedRegionInfo> Register(const std::string& client,
                                                const v1::RegisterRegionRequest& request);
  // NOT_FOUND when `client` has no region `name`.
  absl::Status Unregister(const std::string& client, const std::string& name);
  // `client`'s regions, by name.
  std::vector<v1::SharedRegionInfo> List(const std::string& client);

  // `nbytes` bytes at ref.offset_bytes of `client`'s region ref.region, and the mapping that
  // keeps them valid. Host memory only: a CUDA IPC region is INVALID_ARGUMENT naming
  // `field`.region (only the calls that take ResolvePlaced read device memory). NOT_FOUND naming `field`.region (also for another client's region: names
  // are per client), INVALID_ARGUMENT naming `field`.offset_bytes when the range is not inside
  // the region (overflow-safe), FAILED_PRECONDITION when the object shrank below the mapped size.
  // Marks the region used (its TTL starts again).
  absl::StatusOr<ShmSpan> Resolve(const std::string& client, const v1::ShmRef& ref,
                                  int64_t nbytes, absl::string_view field);
  // Resolve for host and CUDA IPC regions alike.
  absl::StatusOr<PlacedSpan> ResolvePlaced(const std::string& client, const v1::ShmRef& ref,
                                           int64_t nbytes, absl::string_view field);
  PlacedResolver PlacedResolverFor(std::string client);
  int64_t overlap_chunk_bytes() const { return options_.overlap_chunk_bytes; }
  // The registered size of the region a span Resolve returned lies in (0 for an empty span).
  int64_t RegionSize(const ShmSpan& span) const;
  // Resolve bound to one client, for fresnel::FromProto.
  ShmResolver ResolverFor(std::string client);

  // A host buffer of `size` (> 0) bytes for a request's inline array (issue 10: x copied out of
  // the request, y written by the kernel and sent from there): a kept staging buffer when one
  // fits, else a new one (pinned when the registry pins), counted against --shm-bytes while
  // held and given to the staging cache when the last holder of the span's keepalive lets go.
  // Its bytes are undefined (an earlier request's, never a client region's leftovers handed to
  // a client: a buffer used here is zeroed before a client's staging region gets it), so the
  // caller writes every byte it reads. RESOURCE_EXHAUSTED when --shm-bytes is full.
  absl::StatusOr<ShmSpan> AcquireStaging(int64_t size);

  double ttl_s() const { return options_.ttl_s; }
  // Bytes mapped now, including regions unregistered but still in use by a request.
  int64_t mapped_bytes() const { return budget_.used(); }
  // Staging buffers kept for reuse now (bytes), and how many registrations reused one.
  int64_t staging_cached_bytes() const;
  int64_t staging_reuses() const;
  int64_t pin_failures() const { return pin_failures_.load(); }
  // Whether regions are page-locked when registered (options.pin).
  bool pins_regions() const { return options_.pin; }

 private:
  struct Mapping;
  struct StagingCache;
  absl::StatusOr<std::shared_ptr<Mapping>> NewStaging(const std::string& client, int64_t size,
                                                       const std::string& name);
  void Pin(Mapping* mapping);
  absl::StatusOr<std::shared_ptr<Mapping>> OpenCudaIpc(const v1::RegisterRegionRequest& request);
  struct Region {
    std::string shm_name;
    std::shared_ptr<Mapping> mapping;
    Clock::time_point last_used;
  };
  using Key = std::pair<std::string, std::string>;  // (client, name)

  Clock::time_point Now() const;
  void SweepLocked(Clock::time_point now);
  v1::SharedRegionInfo InfoLocked(const Key& key, const Region& region,
                                  Clock::time_point now) const;

  const ShmRegistryOptions options_;
  Budget budget_;
  std::shared_ptr<StagingCache> cache_;
  std::atomic<int64_t> pin_failures_{0};
  std::mutex mu_;
  std::map<Key, Region> regions_;
};

}  // namespace fresnel::server
