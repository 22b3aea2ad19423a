#include "server/shm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace fresnel::server {

// One mmap of a shared-memory object. Unmapped (and its bytes given back to the budget) when the
// last holder — the registry or a request's ShmSpan — lets go.
struct ShmRegistry::Mapping {
  void* addr = MAP_FAILED;
  int64_t size = 0;
  int fd = -1;  // kept open to check the object's size before each use
  dev_t dev = 0;
  ino_t ino = 0;
  Budget::Reservation reservation;

  ~Mapping() {
    if (addr != MAP_FAILED) munmap(addr, static_cast<size_t>(size));
    if (fd >= 0) close(fd);
  }
};

namespace {

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
      budget_("--shm-bytes", options_.cap_bytes, std::move(observer)) {}

ShmRegistry::~ShmRegistry() = default;

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
  return info;
}

absl::StatusOr<v1::SharedRegionInfo> ShmRegistry::Register(
    const std::string& client, const v1::RegisterRegionRequest& request) {
  if (absl::Status st = CheckRegionName(request.name(), "name"); !st.ok()) return st;
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
  // Reserve before mapping: a client cannot make the server map more than --shm-bytes.
  absl::StatusOr<Budget::Reservation> reservation =
      budget_.Reserve(request.size_bytes(), absl::StrCat("shared-memory region '", request.name(),
                                                         "'"));
  if (!reservation.ok()) return reservation.status();

  auto mapping = std::make_shared<Mapping>();
  mapping->reservation = *std::move(reservation);
  mapping->size = request.size_bytes();
  if (request.shm_name().empty()) {
    // A staging buffer of the server's own: pages materialize as WriteRegion fills them.
    mapping->addr = mmap(nullptr, static_cast<size_t>(mapping->size), PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  } else {
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
  }
  if (mapping->addr == MAP_FAILED) {
    const int err = errno;
    return absl::ResourceExhaustedError(absl::StrCat("cannot map region '", request.name(), "' (",
                                                     mapping->size, " bytes): ", strerror(err)));
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

absl::StatusOr<ShmSpan> ShmRegistry::Resolve(const std::string& client, const v1::ShmRef& ref,
                                             int64_t nbytes, absl::string_view field) {
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
  ShmSpan span;
  span.data = static_cast<char*>(mapping->addr) + offset;
  span.size = nbytes;
  span.keepalive = std::move(mapping);
  return span;
}

ShmResolver ShmRegistry::ResolverFor(std::string client) {
  return [this, client = std::move(client)](const v1::ShmRef& ref, int64_t nbytes,
                                            absl::string_view field) {
    return Resolve(client, ref, nbytes, field);
  };
}

}  // namespace fresnel::server
