// SPDX-License-Identifier: Apache-2.0
#include "sandbox/container/layer_mounts.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/status.h"

namespace dsec::container {

absl::Status CheckLayerFiles(const std::vector<std::string>& layers) {
  if (layers.empty()) return absl::InvalidArgumentError("at least one layer is needed");
  std::vector<std::pair<dev_t, ino_t>> files;
  for (const std::string& layer : layers) {
    struct stat st;
    if (::stat(layer.c_str(), &st) != 0) return ErrnoToStatus(absl::StrCat("layer ", layer));
    if (!S_ISREG(st.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat("layer ", layer, " is not an image file"));
    }
    if (std::find(files.begin(), files.end(), std::make_pair(st.st_dev, st.st_ino)) != files.end()) {
      return absl::InvalidArgumentError(absl::StrCat("layer ", layer, " is listed twice"));
    }
    files.emplace_back(st.st_dev, st.st_ino);
  }
  return absl::OkStatus();
}

bool LayerMount::used_loop_device() const {
  return detached_.valid() ? detached_.used_loop_device() : attached_.used_loop_device();
}

LayerMountCache::LayerMountCache(bool share, size_t keep_unused)
    : share_(share), keep_unused_(keep_unused) {}

LayerMountCache& LayerMountCache::Default() {
  static LayerMountCache* cache = [] {
    const char* env = std::getenv("DSEC_LAYER_SHARING");
    bool share = env == nullptr || std::strcmp(env, "0") != 0;
    return new LayerMountCache(share);
  }();
  return *cache;
}

bool LayerMountCache::SharingLocked() {
  if (probed_ < 0) probed_ = share_ && OverlayAcceptsDetachedLayers() ? 1 : 0;
  return probed_ == 1;
}

bool LayerMountCache::sharing() {
  std::lock_guard<std::mutex> lock(mu_);
  return SharingLocked();
}

absl::StatusOr<std::shared_ptr<const LayerMount>> LayerMountCache::Acquire(
    const std::string& image, const std::string& own_target) {
  struct stat st;
  if (::stat(image.c_str(), &st) != 0) return ErrnoToStatus(absl::StrCat("layer ", image));
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("layer ", image, " is not an image file"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!SharingLocked()) {
    if (::mkdir(own_target.c_str(), 0755) != 0 && errno != EEXIST) {
      return ErrnoToStatus(absl::StrCat("mkdir ", own_target));
    }
    auto own = std::make_shared<LayerMount>();
    DSEC_ASSIGN_OR_RETURN(own->attached_, Mount::Erofs(image, own_target));
    own->lower_dir_ = own_target;
    ++stats_.mounts;
    return std::shared_ptr<const LayerMount>(std::move(own));
  }
  TrimLocked();
  Key key{st.st_dev, st.st_ino, st.st_size,
          static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec,
          static_cast<int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec};
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (!(it->key == key)) continue;
    entries_.splice(entries_.begin(), entries_, it);
    ++stats_.hits;
    return std::shared_ptr<const LayerMount>(entries_.front().mount);
  }
  // Between the stat above and this mount the file could be replaced; the
  // entry would then describe the old file and never match again (a
  // later acquire mounts anew), which costs a mount, not correctness.
  auto shared = std::make_shared<LayerMount>();
  DSEC_ASSIGN_OR_RETURN(shared->detached_, DetachedMount::Erofs(image));
  shared->lower_dir_ = shared->detached_.path();
  ++stats_.mounts;
  entries_.push_front(Entry{key, image, shared});
  TrimLocked();
  DSEC_LOG(debug, "container: shared layer mount of {} ({} cached)", image, entries_.size());
  return std::shared_ptr<const LayerMount>(std::move(shared));
}

void LayerMountCache::TrimLocked() {
  // Only Acquire (under mu_) adds references to a cached mount, so a use
  // count of 1 seen here means nobody else holds it. Runs before each
  // lookup and after each insertion: the most recently used unused mounts
  // are the ones kept.
  size_t unused = 0;
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->mount.use_count() == 1 && ++unused > keep_unused_) {
      it = entries_.erase(it);
      ++stats_.evictions;
    } else {
      ++it;
    }
  }
}

void LayerMountCache::Forget(const std::string& image) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->image == image && it->mount.use_count() == 1) {
      it = entries_.erase(it);
      ++stats_.evictions;
    } else {
      ++it;
    }
  }
}

LayerMountStats LayerMountCache::stats() {
  std::lock_guard<std::mutex> lock(mu_);
  LayerMountStats s = stats_;
  s.sharing = probed_ == 1;
  s.cached = entries_.size();
  return s;
}

}  // namespace dsec::container
