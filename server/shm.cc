#include "server/shm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "fresnel/core/status.h"
#include "fresnel/core/gpu.h"
#include "fresnel/core/gpu_ipc.h"

namespace fresnel::server {

// One mmap of a shared-memory object. Unmapped (and its bytes given back to the budget) when the
// last holder — the registry or a request's ShmSpan — lets go.
struct ShmRegistry::Mapping {
  void* addr = MAP_FAILED;
  int64_t size = 0;      // the registered size (what requests may address)
  int64_t capacity = 0;  // the mapped length (a reused staging buffer may be larger)
  int fd = -1;  // kept open to check the object's size before each use; -1 for staging
  dev_t dev = 0;
  ino_t ino = 0;
  bool pinned = false;
  std::string client;  // the last client whose region this was (staging buffers)
  Budget::Reservation reservation;
  // A CUDA IPC region: the opened allocation and where the region starts in it (device memory of
  // cuda_device); addr stays MAP_FAILED.
  std::unique_ptr<GpuIpcMapping> ipc;
  char* device_data = nullptr;
  int cuda_device = -1;

  ~Mapping() {
    if (pinned) UnpinHostMemory(addr);
    if (addr != MAP_FAILED) munmap(addr, static_cast<size_t>(capacity));
    if (fd >= 0) close(fd);
  }
};

// Staging buffers whose region is gone, kept (mapped, faulted in, pinned) for the next staging
// region. Shared with the deleters of live staging mappings, which give their buffer back here
// when the last holder lets go (or delete it when the registry is gone).
struct ShmRegistry::StagingCache {
  explicit StagingCache(int64_t keep) : keep_bytes(keep) {}
  const int64_t keep_bytes;
  mutable std::mutex mu;
  int64_t idle_bytes = 0;
  int64_t reuses = 0;
  std::vector<std::unique_ptr<Mapping>> idle;

  void Return(Mapping* m) {
    std::unique_ptr<Mapping> owned(m);
    std::lock_guard<std::mutex> lock(mu);
    if (owned->capacity > keep_bytes - idle_bytes) return;  // deleted (unmapped) here
    idle_bytes += owned->capacity;
    idle.push_back(std::move(owned));
  }

  // The smallest kept buffer of capacity in [size, 2 * size], or null.
  std::unique_ptr<Mapping> Take(int64_t size) {
    std::lock_guard<std::mutex> lock(mu);
    int best = -1;
    for (int i = 0; i < static_cast<int>(idle.size()); ++i) {
      const int64_t c = idle[i]->capacity;
      if (c >= size && c / 2 <= size && (best < 0 || c < idle[best]->capacity)) best = i;
    }
    if (best < 0) return nullptr;
    std::unique_ptr<Mapping> m = std::move(idle[best]);
    idle.erase(idle.begin() + best);
    idle_bytes -= m->capacity;
    ++reuses;
    return m;
  }

  // Unmaps every kept buffer (their bytes go back to the budget).
  void Clear() {
    std::vector<std::unique_ptr<Mapping>> dropped;
    std::lock_guard<std::mutex> lock(mu);
    dropped.swap(idle);
    idle_bytes = 0;
  }
};

namespace {

// The owner recorded on a staging buffer used for a request's inline arrays: no client's, so
// a client's staging region that gets it next gets it zeroed.
constexpr char kInlineStaging[] = "\x01inline";

constexpr size_t kMaxRegionName = 128;
constexpr size_t kMaxShmName = 255;  // NAME_MAX, with the leading '/'

absl::Status CheckRegionName(const std::string& name, absl::string_view field) {
  if (name.empty() || name.size() > kMaxRegionName) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": a region name has 1-", kMaxRegionName,
                                                   " characters (got ", name.size(), ")"));
  }
  for (char c : name) {
    if (c < 0x20 || c > 0x7e) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": a region name is printable ASCII only"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckShmName(const std::string& name) {
  if (name.size() < 2 || name.size() > kMaxShmName || name[0] != '/' ||
      name.find('/', 1) != std::string::npos || name.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shm_name: a POSIX shared-memory name is '/' followed by 1-", kMaxShmName - 1,
        " characters without '/' (got '", name.substr(0, 64), "')"));
  }
  return absl::OkStatus();
}

absl::Status OpenError(int err, const std::string& shm_name) {
  const std::string what = absl::StrCat("shm_name: cannot open '", shm_name, "': ", strerror(err));
  if (err == ENOENT) {
    return absl::NotFoundError(absl::StrCat(
        what, " (the object must exist on the server's host: shared memory works for clients "
              "on the same host only)"));
  }
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(what);
  if (err == EINVAL || err == ENAMETOOLONG) return absl::InvalidArgumentError(what);
  return absl::UnavailableError(what);
}

}  // namespace

ShmRegistry::ShmRegistry(ShmRegistryOptions options, Budget::Observer observer)
    : options_(std::move(options)),
      budget_("--shm-bytes", options_.cap_bytes, std::move(observer)),
      cache_(std::make_shared<StagingCache>(std::max<int64_t>(0, options_.staging_cache_bytes))) {}

ShmRegistry::~ShmRegistry() {
  std::lock_guard<std::mutex> lock(mu_);
  regions_.clear();
  cache_->Clear();
}

int64_t ShmRegistry::staging_cached_bytes() const {
  std::lock_guard<std::mutex> lock(cache_->mu);
  return cache_->idle_bytes;
}

int64_t ShmRegistry::staging_reuses() const {
  std::lock_guard<std::mutex> lock(cache_->mu);
  return cache_->reuses;
}

void ShmRegistry::Pin(Mapping* mapping) {
  if (!options_.pin || mapping->pinned) return;
  mapping->pinned = PinHostMemory(mapping->addr, mapping->capacity).ok();
  if (!mapping->pinned) pin_failures_.fetch_add(1);
}

// A staging buffer of `size` bytes for `client`: a kept one when one fits (zeroed first when it
// was another client's, so no client reads another's bytes), else a fresh anonymous mapping
// (zero pages; huge pages where the kernel allows, so filling it takes few faults).
absl::StatusOr<std::shared_ptr<ShmRegistry::Mapping>> ShmRegistry::NewStaging(
    const std::string& client, int64_t size, const std::string& name) {
  std::unique_ptr<Mapping> mapping = cache_->Take(size);
  if (mapping != nullptr) {
    if (mapping->client != client && client != kInlineStaging) {
      std::memset(mapping->addr, 0, static_cast<size_t>(mapping->capacity));
    }
  } else {
    const std::string what = absl::StrCat("shared-memory region '", name, "'");
    absl::StatusOr<Budget::Reservation> reservation = budget_.Reserve(size, what);
    if (!reservation.ok()) {
      cache_->Clear();  // kept buffers are only a cache: give their bytes to this region
      reservation = budget_.Reserve(size, what);
    }
    if (!reservation.ok()) return reservation.status();
    mapping = std::make_unique<Mapping>();
    mapping->reservation = *std::move(reservation);
    mapping->capacity = size;
    mapping->addr = mmap(nullptr, static_cast<size_t>(size), PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mapping->addr == MAP_FAILED) {
      const int err = errno;
      return absl::ResourceExhaustedError(absl::StrCat("cannot map region '", name, "' (", size,
                                                       " bytes): ", strerror(err)));
    }
#ifdef MADV_HUGEPAGE
    madvise(mapping->addr, static_cast<size_t>(size), MADV_HUGEPAGE);
#endif
    Pin(mapping.get());
  }
  mapping->size = size;
  mapping->client = client;
  std::weak_ptr<StagingCache> cache = cache_;
  return std::shared_ptr<Mapping>(mapping.release(), [cache](Mapping* m) {
    if (std::shared_ptr<StagingCache> c = cache.lock()) {
      c->Return(m);
    } else {
      delete m;
    }
  });
}

absl::StatusOr<ShmSpan> ShmRegistry::AcquireStaging(int64_t size) {
  if (size <= 0) return absl::InvalidArgumentError("staging: the size must be positive");
  FRESNEL_ASSIGN_OR_RETURN(std::shared_ptr<Mapping> mapping,
                           NewStaging(kInlineStaging, size, "inline array staging"));
  ShmSpan span;
  span.data = static_cast<char*>(mapping->addr);
  span.size = size;
  span.keepalive = std::move(mapping);
  return span;
}

namespace {

std::string Hex(const std::string& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

}  // namespace

absl::StatusOr<std::shared_ptr<ShmRegistry::Mapping>> ShmRegistry::OpenCudaIpc(
    const v1::RegisterRegionRequest& request) {
  const v1::CudaIpcRegion& ipc = request.cuda_ipc();
  if (ipc.handle().size() != static_cast<size_t>(kCudaIpcHandleBytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda_ipc.handle: a cudaIpcMemHandle_t has ", kCudaIpcHandleBytes, " bytes (got ",
        ipc.handle().size(), ")"));
  }
  if (ipc.device_uuid().size() != static_cast<size_t>(kGpuUuidBytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda_ipc.device_uuid: the device's UUID has ", kGpuUuidBytes,
        " raw bytes (cudaDeviceProp.uuid; got ", ipc.device_uuid().size(), ")"));
  }
  if (ipc.offset_bytes() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda_ipc.offset_bytes: must be >= 0 (got ", ipc.offset_bytes(), ")"));
  }
  if (options_.cuda_devices.empty()) {
    return absl::FailedPreconditionError(
        "cuda_ipc: this server runs CPU-only (no CUDA device), so it cannot open device memory; "
        "register host memory (shm_name) instead");
  }
  int ordinal = -1;
  std::string known;
  for (const auto& [o, uuid] : options_.cuda_devices) {
    if (uuid == ipc.device_uuid()) ordinal = o;
    absl::StrAppend(&known, known.empty() ? "" : ", ", "cuda:", o, " GPU-", Hex(uuid));
  }
  if (ordinal < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cuda_ipc.device_uuid: the server has no device GPU-", Hex(ipc.device_uuid()),
        " (the client's cuda:", ipc.device_ordinal(), "); it uses ", known));
  }
  auto mapping = std::make_shared<Mapping>();
  FRESNEL_ASSIGN_OR_RETURN(mapping->ipc,
                           GpuIpcMapping::Open(ordinal, ipc.handle(), "cuda_ipc.handle"));
  const int64_t room = mapping->ipc->allocation_bytes();
  if (ipc.offset_bytes() > room || request.size_bytes() > room - ipc.offset_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "size_bytes: ", request.size_bytes(), " bytes from cuda_ipc.offset_bytes ",
        ipc.offset_bytes(), " are not inside the allocation of ", room, " bytes"));
  }
  mapping->device_data = static_cast<char*>(mapping->ipc->base()) + ipc.offset_bytes();
  mapping->cuda_device = ordinal;
  mapping->size = request.size_bytes();
  mapping->capacity = request.size_bytes();
  return mapping;
}

Clock::time_point ShmRegistry::Now() const { return options_.now ? options_.now() : Clock::now(); }

void ShmRegistry::SweepLocked(Clock::time_point now) {
  const auto ttl = std::chrono::duration<double>(options_.ttl_s);
  for (auto it = regions_.begin(); it != regions_.end();) {
    if (now - it->second.last_used > ttl) {
      it = regions_.erase(it);
    } else {
      ++it;
    }
  }
}

v1::SharedRegionInfo ShmRegistry::InfoLocked(const Key& key, const Region& region,
                                            Clock::time_point now) const {
  v1::SharedRegionInfo info;
  info.set_name(key.second);
  info.set_shm_name(region.shm_name);
  info.set_size_bytes(region.mapping->size);
  info.set_idle_seconds(std::chrono::duration<double>(now - region.last_used).count());
  info.set_cuda_device(region.mapping->cuda_device);
  return info;
}

absl::StatusOr<v1::SharedRegionInfo> ShmRegistry::Register(
    const std::string& client, const v1::RegisterRegionRequest& request) {
  if (absl::Status st = CheckRegionName(request.name(), "name"); !st.ok()) return st;
  if (request.has_cuda_ipc() && !request.shm_name().empty()) {
    return absl::InvalidArgumentError(
        "shm_name: set shm_name (host memory) or cuda_ipc (device memory), not both");
  }
  if (!request.shm_name().empty()) {
    if (absl::Status st = CheckShmName(request.shm_name()); !st.ok()) return st;
  }
  if (request.size_bytes() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("size_bytes: must be > 0 (got ", request.size_bytes(), ")"));
  }
  if (static_cast<uint64_t>(request.size_bytes()) > SIZE_MAX) {
    return absl::InvalidArgumentError("size_bytes: larger than this host's address space");
  }
  const Key key(client, request.name());
  {
    std::lock_guard<std::mutex> lock(mu_);
    SweepLocked(Now());
    if (regions_.count(key) != 0) {
      return absl::AlreadyExistsError(absl::StrCat(
          "name: this client already has a region '", request.name(), "'; unregister it first"));
    }
    if (static_cast<int>(regions_.size()) >= options_.max_regions) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the server holds its limit of ", options_.max_regions, " shared-memory regions"));
    }
  }
  std::shared_ptr<Mapping> mapping;
  if (request.has_cuda_ipc()) {
    FRESNEL_ASSIGN_OR_RETURN(mapping, OpenCudaIpc(request));
  } else if (request.shm_name().empty()) {
    // A staging buffer of the server's own (kept ones are reused).
    FRESNEL_ASSIGN_OR_RETURN(mapping, NewStaging(client, request.size_bytes(), request.name()));
  } else {
    // Reserve before mapping: a client cannot make the server map more than --shm-bytes.
    const std::string what = absl::StrCat("shared-memory region '", request.name(), "'");
    absl::StatusOr<Budget::Reservation> reservation = budget_.Reserve(request.size_bytes(), what);
    if (!reservation.ok()) {
      cache_->Clear();
      reservation = budget_.Reserve(request.size_bytes(), what);
    }
    if (!reservation.ok()) return reservation.status();
    mapping = std::make_shared<Mapping>();
    mapping->reservation = *std::move(reservation);
    mapping->size = request.size_bytes();
    mapping->capacity = request.size_bytes();
    mapping->fd = shm_open(request.shm_name().c_str(), O_RDWR, 0);
    if (mapping->fd < 0) return OpenError(errno, request.shm_name());
    struct stat st;
    if (fstat(mapping->fd, &st) != 0) return OpenError(errno, request.shm_name());
    if (st.st_size < request.size_bytes()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "size_bytes: ", request.size_bytes(), " bytes asked, but '", request.shm_name(),
          "' has ", st.st_size, " (ftruncate it first)"));
    }
    mapping->dev = st.st_dev;
    mapping->ino = st.st_ino;
    mapping->addr = mmap(nullptr, static_cast<size_t>(mapping->size), PROT_READ | PROT_WRITE,
                         MAP_SHARED, mapping->fd, 0);
    if (mapping->addr == MAP_FAILED) {
      const int err = errno;
      return absl::ResourceExhaustedError(absl::StrCat("cannot map region '", request.name(),
                                                       "' (", mapping->size,
                                                       " bytes): ", strerror(err)));
    }
    Pin(mapping.get());
  }

  std::lock_guard<std::mutex> lock(mu_);
  const Clock::time_point now = Now();
  if (regions_.count(key) != 0) {  // registered by a concurrent call meanwhile
    return absl::AlreadyExistsError(absl::StrCat("name: this client already has a region '",
                                                 request.name(), "'"));
  }
  for (const auto& [other, region] : regions_) {
    if (mapping->fd >= 0 && other.first != client && region.mapping->fd >= 0 &&
        region.mapping->dev == mapping->dev &&
        region.mapping->ino == mapping->ino) {
      return absl::PermissionDeniedError(absl::StrCat(
          "shm_name: '", request.shm_name(), "' is registered by another client"));
    }
    if (mapping->ipc != nullptr && other.first != client && region.mapping->ipc != nullptr &&
        region.mapping->ipc->base() == mapping->ipc->base()) {
      return absl::PermissionDeniedError(
          "cuda_ipc.handle: this allocation is registered by another client");
    }
  }
  Region& region = regions_[key];
  region.shm_name = request.shm_name();
  region.mapping = std::move(mapping);
  region.last_used = now;
  return InfoLocked(key, region, now);
}

absl::Status ShmRegistry::Unregister(const std::string& client, const std::string& name) {
  std::shared_ptr<Mapping> released;  // unmapped outside the lock when it is the last holder
  std::lock_guard<std::mutex> lock(mu_);
  SweepLocked(Now());
  auto it = regions_.find(Key(client, name));
  if (it == regions_.end()) {
    return absl::NotFoundError(
        absl::StrCat("name: this client has no shared-memory region '", name, "'"));
  }
  released = std::move(it->second.mapping);
  regions_.erase(it);
  return absl::OkStatus();
}

std::vector<v1::SharedRegionInfo> ShmRegistry::List(const std::string& client) {
  std::lock_guard<std::mutex> lock(mu_);
  const Clock::time_point now = Now();
  SweepLocked(now);
  std::vector<v1::SharedRegionInfo> out;
  for (auto it = regions_.lower_bound(Key(client, "")); it != regions_.end() &&
                                                        it->first.first == client;
       ++it) {
    out.push_back(InfoLocked(it->first, it->second, now));
  }
  return out;
}

absl::StatusOr<PlacedSpan> ShmRegistry::ResolvePlaced(const std::string& client,
                                                      const v1::ShmRef& ref, int64_t nbytes,
                                                      absl::string_view field) {
  std::shared_ptr<Mapping> mapping;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const Clock::time_point now = Now();
    SweepLocked(now);
    auto it = regions_.find(Key(client, ref.region()));
    if (it == regions_.end()) {
      return absl::NotFoundError(absl::StrCat(field, ".region: no shared-memory region '",
                                              ref.region().substr(0, kMaxRegionName),
                                              "' registered by this client"));
    }
    it->second.last_used = now;
    mapping = it->second.mapping;
  }
  const int64_t offset = ref.offset_bytes();
  if (offset < 0 || nbytes < 0 || offset > mapping->size || nbytes > mapping->size - offset) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".offset_bytes: ", nbytes, " bytes at offset ", offset,
        " are not inside region '", ref.region(), "' of ", mapping->size, " bytes"));
  }
  // A client that shrinks its object after registering would make reads past the new end fault
  // (SIGBUS); refuse while it is smaller than the mapping.
  struct stat st;
  if (mapping->fd >= 0 && (fstat(mapping->fd, &st) != 0 || st.st_size < mapping->size)) {
    return absl::FailedPreconditionError(absl::StrCat(
        field, ".region: the shared-memory object of '", ref.region(),
        "' is now smaller than the registered ", mapping->size, " bytes"));
  }
  PlacedSpan placed;
  placed.cuda_device = mapping->cuda_device;
  placed.span.data = (mapping->ipc != nullptr ? mapping->device_data
                                              : static_cast<char*>(mapping->addr)) +
                     offset;
  placed.span.size = nbytes;
  placed.span.keepalive = std::move(mapping);
  return placed;
}

absl::StatusOr<ShmSpan> ShmRegistry::Resolve(const std::string& client, const v1::ShmRef& ref,
                                             int64_t nbytes, absl::string_view field) {
  FRESNEL_ASSIGN_OR_RETURN(PlacedSpan placed, ResolvePlaced(client, ref, nbytes, field));
  if (placed.cuda_device >= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".region: '", ref.region().substr(0, kMaxRegionName),
        "' is a CUDA IPC region (device memory): only Upfirdn and ResamplePoly (x, y_shm) read "
        "or write one; this array needs host memory"));
  }
  return std::move(placed.span);
}

PlacedResolver ShmRegistry::PlacedResolverFor(std::string client) {
  return [this, client = std::move(client)](const v1::ShmRef& ref, int64_t nbytes,
                                            absl::string_view field) {
    return ResolvePlaced(client, ref, nbytes, field);
  };
}



int64_t ShmRegistry::RegionSize(const ShmSpan& span) const {
  const auto* mapping = static_cast<const Mapping*>(span.keepalive.get());
  return mapping != nullptr ? mapping->size : 0;
}

ShmResolver ShmRegistry::ResolverFor(std::string client) {
  return [this, client = std::move(client)](const v1::ShmRef& ref, int64_t nbytes,
                                            absl::string_view field) {
    return Resolve(client, ref, nbytes, field);
  };
}

}  // namespace fresnel::server
