// SPDX-License-Identifier: Apache-2.0
#include "sandbox/layers/layer_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "sandbox/layers/fs_util.h"
#include "sandbox/layers/sha256.h"
#include "sandbox/layers/tree_digest.h"
#include "base/scoped_fd.h"
#include "base/status.h"

namespace dsec::layers {
namespace {

using Refs = std::map<std::string, std::string>;          // tag -> digest
using Layers = std::map<std::string, LayerMetadata>;      // digest -> metadata

absl::StatusOr<ScopedFd> Lock(const std::string& path, bool exclusive) {
  ScopedFd fd(open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!fd.valid()) return ErrnoToStatus(absl::StrCat("open ", path));
  while (flock(fd.get(), exclusive ? LOCK_EX : LOCK_SH) != 0) {
    if (errno != EINTR) return ErrnoStatus(absl::StrCat("flock ", path));
  }
  return fd;
}

absl::Status MakeDir(const std::string& path) {
  if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    return ErrnoToStatus(absl::StrCat("mkdir ", path));
  }
  return absl::OkStatus();
}

std::string NowRfc3339() {
  time_t now = time(nullptr);
  struct tm tm {};
  gmtime_r(&now, &tm);
  char buf[32];
  strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// 8-4-4-4-12 from the first 16 bytes of the digest's hex.
std::string UuidFromHex(const std::string& hex) {
  return absl::StrCat(hex.substr(0, 8), "-", hex.substr(8, 4), "-", hex.substr(12, 4), "-",
                      hex.substr(16, 4), "-", hex.substr(20, 12));
}

// The digest of a compressed layer: the tree digest (which covers the
// parents) followed by the compression spec, hashed again. Uncompressed
// layers keep the tree digest itself.
std::string LayerDigest(const TreeDigest& tree, const std::string& compression) {
  if (!IsCompressed(compression)) return tree.Name();
  Sha256 h;
  h.Update(tree.digest.data(), tree.digest.size());
  const uint8_t separator = 0;
  h.Update(&separator, 1);
  h.Update("erofs-compression:");
  h.Update(compression);
  return "sha256:" + ToHex(h.Finish());
}

bool IsHex(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
  });
}

}  // namespace

// Everything read under one lock: the tags and all layer metadata.
struct StoreState {
  Refs refs;
  Layers layers;
};

namespace {

absl::StatusOr<StoreState> LoadState(const std::string& refs_path, const std::string& layers_dir) {
  StoreState state;
  struct stat st;
  if (stat(refs_path.c_str(), &st) == 0) {
    DSEC_ASSIGN_OR_RETURN(std::string text, ReadFile(refs_path));
    try {
      nlohmann::json j = nlohmann::json::parse(text);
      state.refs = j.at("refs").get<Refs>();
    } catch (const nlohmann::json::exception& e) {
      return absl::InternalError(absl::StrCat(refs_path, " is corrupt: ", e.what()));
    }
  }
  DSEC_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDirectory(layers_dir));
  for (const auto& n : names) {
    if (n.size() != 64 + 5 || n.substr(64) != ".json") continue;
    DSEC_ASSIGN_OR_RETURN(std::string text, ReadFile(JoinPath(layers_dir, n)));
    auto m = LayerMetadataFromJson(text);
    if (!m.ok()) return Annotate(m.status(), JoinPath(layers_dir, n));
    state.layers.emplace(m->digest, *std::move(m));
  }
  return state;
}

absl::Status SaveRefs(const std::string& path, const Refs& refs) {
  nlohmann::json j = {{"refs", refs}};
  return WriteFileAtomic(path, j.dump(2) + "\n");
}

absl::StatusOr<std::string> ResolveIn(const StoreState& s, const std::string& ref) {
  if (IsDigest(ref)) {
    if (s.layers.count(ref) == 0) return absl::NotFoundError(absl::StrCat("no layer ", ref));
    return ref;
  }
  if (ref.find(':') != std::string::npos) {
    auto it = s.refs.find(ref);
    if (it == s.refs.end() || s.layers.count(it->second) == 0) {
      return absl::NotFoundError(absl::StrCat("no layer tagged ", ref));
    }
    return it->second;
  }
  std::vector<std::string> matches;
  for (const auto& [tag, digest] : s.refs) {
    if (tag.substr(0, tag.find(':')) == ref && s.layers.count(digest)) matches.push_back(tag);
  }
  if (matches.size() == 1) return s.refs.at(matches[0]);
  if (matches.size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer name ", ref, " is ambiguous: ", absl::StrJoin(matches, ", ")));
  }
  if (ref.size() >= 8 && IsHex(ref)) {
    std::vector<std::string> found;
    for (const auto& [digest, m] : s.layers) {
      if (digest.compare(7, ref.size(), ref) == 0) found.push_back(digest);
    }
    if (found.size() == 1) return found[0];
    if (found.size() > 1) {
      return absl::InvalidArgumentError(absl::StrCat("digest prefix ", ref, " is ambiguous"));
    }
  }
  return absl::NotFoundError(absl::StrCat("no layer ", ref));
}

std::vector<std::string> TagsOf(const StoreState& s, const std::string& digest) {
  std::vector<std::string> tags;
  for (const auto& [tag, d] : s.refs) {
    if (d == digest) tags.push_back(tag);
  }
  return tags;
}

std::vector<std::string> ChildrenOf(const StoreState& s, const std::string& digest) {
  std::vector<std::string> children;
  for (const auto& [d, m] : s.layers) {
    if (std::find(m.parents.begin(), m.parents.end(), digest) != m.parents.end()) {
      children.push_back(m.Tag() + " (" + d.substr(0, 19) + ")");
    }
  }
  return children;
}

}  // namespace

absl::StatusOr<LayerStore> LayerStore::Create(LayerStoreOptions options) {
  if (options.root.empty()) return absl::InvalidArgumentError("layer store root is empty");
  if (!options.builder) options.builder = BuildErofsImage;
  LayerStore store(std::move(options));
  // mkdir -p for the root itself: /var/lib/dsec-vmm may not exist yet.
  std::string partial;
  for (size_t pos = 0; pos != std::string::npos;) {
    pos = store.root().find('/', pos + 1);
    partial = store.root().substr(0, pos);
    if (!partial.empty()) DSEC_RETURN_IF_ERROR(MakeDir(partial));
  }
  DSEC_RETURN_IF_ERROR(MakeDir(store.LayersDir()));
  DSEC_RETURN_IF_ERROR(MakeDir(store.TmpDir()));
  return store;
}

std::string LayerStore::LayersDir() const { return JoinPath(options_.root, "layers"); }
std::string LayerStore::RefsPath() const { return JoinPath(options_.root, "refs.json"); }
std::string LayerStore::TmpDir() const { return JoinPath(options_.root, "tmp"); }
std::string LayerStore::ImagePath(const std::string& digest) const {
  return JoinPath(LayersDir(), (digest.size() > 7 ? digest.substr(7) : digest) + ".erofs");
}
std::string LayerStore::DigestOfImage(const std::string& path) const {
  const std::string prefix = LayersDir() + "/";
  constexpr size_t kSuffix = sizeof(".erofs") - 1;
  if (path.rfind(prefix, 0) != 0 || path.size() <= prefix.size() + kSuffix ||
      path.compare(path.size() - kSuffix, kSuffix, ".erofs") != 0) {
    return "";
  }
  return "sha256:" + path.substr(prefix.size(), path.size() - prefix.size() - kSuffix);
}
std::string LayerStore::MetadataPath(const std::string& digest) const {
  return JoinPath(LayersDir(), (digest.size() > 7 ? digest.substr(7) : digest) + ".json");
}

absl::StatusOr<BuildResult> LayerStore::Build(const std::string& src_dir, const BuildRequest& request) {
  if (!IsValidNameComponent(request.name) || !IsValidNameComponent(request.version)) {
    return absl::InvalidArgumentError(absl::StrCat("bad layer name or version '", request.name, ":",
                                                   request.version, "' (use [A-Za-z0-9._+-])"));
  }
  DSEC_RETURN_IF_ERROR(ValidateCompressionSpec(request.compression));
  const std::string compression = IsCompressed(request.compression) ? request.compression : kNoCompression;
  std::vector<std::string> parents;
  {
    DSEC_ASSIGN_OR_RETURN(ScopedFd lock, Lock(JoinPath(root(), "lock"), /*exclusive=*/false));
    DSEC_ASSIGN_OR_RETURN(StoreState state, LoadState(RefsPath(), LayersDir()));
    for (const auto& p : request.parents) {
      DSEC_ASSIGN_OR_RETURN(std::string d, ResolveIn(state, p));
      parents.push_back(d);
    }
  }
  // The walk and mkfs run without the store lock; only the commit takes it.
  DSEC_ASSIGN_OR_RETURN(TreeDigest tree, DigestTree(src_dir, parents));
  BuildResult result;
  LayerMetadata& m = result.layer;
  m.name = request.name;
  m.version = request.version;
  m.digest = LayerDigest(tree, compression);
  m.compression = compression;
  m.parents = parents;
  m.content_bytes = tree.stats.content_bytes;
  m.entries = tree.stats.regular_files + tree.stats.directories + tree.stats.other_entries;
  m.created = NowRfc3339();
  m.source = request.source.empty() ? "dir:" + src_dir : request.source;
  const std::string hex = m.Hex();

  std::string build_dir;
  ScopedFd build_lock;
  struct stat st;
  bool have_image = stat(ImagePath(m.digest).c_str(), &st) == 0 &&
                    stat(MetadataPath(m.digest).c_str(), &st) == 0;
  if (!have_image) {
    DSEC_ASSIGN_OR_RETURN(build_dir, MakeTempDir(TmpDir(), "build-"));
    // Held while building, so that Gc can tell a live build from a dead one.
    DSEC_ASSIGN_OR_RETURN(build_lock, Lock(JoinPath(build_dir, "lock"), /*exclusive=*/true));
    ErofsBuildOptions opts;
    opts.mkfs = options_.mkfs;
    opts.uuid = UuidFromHex(hex);
    opts.build_time = tree.stats.max_mtime_sec + 1;
    opts.compression = compression;
    auto written = options_.builder(src_dir, JoinPath(build_dir, hex + ".erofs"), opts);
    if (!written.ok()) {
      RemoveTree(build_dir).IgnoreError();
      return written.status();
    }
    if (request.max_image_bytes != 0) {
      absl::Status fits = [&]() -> absl::Status {
        struct stat image;
        if (stat(JoinPath(build_dir, hex + ".erofs").c_str(), &image) != 0) return ErrnoStatus("stat the image");
        if (static_cast<uint64_t>(image.st_size) <= request.max_image_bytes) return absl::OkStatus();
        return absl::ResourceExhaustedError(absl::StrCat("the layer's image is ", image.st_size,
                                                         " bytes, over the limit of ", request.max_image_bytes));
      }();
      if (!fits.ok()) {
        RemoveTree(build_dir).IgnoreError();
        return fits;
      }
    }
    result.write_bytes = *written;
  }

  DSEC_ASSIGN_OR_RETURN(ScopedFd lock, Lock(JoinPath(root(), "lock"), /*exclusive=*/true));
  absl::Status status = [&]() -> absl::Status {
    DSEC_ASSIGN_OR_RETURN(StoreState state, LoadState(RefsPath(), LayersDir()));
    for (const auto& p : parents) {
      if (state.layers.count(p) == 0) {
        return absl::NotFoundError(absl::StrCat("parent ", p, " was removed during the build"));
      }
    }
    auto existing = state.layers.find(m.digest);
    if (existing != state.layers.end()) {
      result.layer = existing->second;
      result.reused = true;
    } else {
      std::string built = JoinPath(build_dir, hex + ".erofs");
      if (build_dir.empty()) {
        return absl::InternalError(absl::StrCat("layer ", m.digest, " vanished during the build"));
      }
      if (stat(built.c_str(), &st) != 0) return ErrnoStatus(absl::StrCat("stat ", built));
      m.size = static_cast<uint64_t>(st.st_size);
      if (chmod(built.c_str(), 0444) != 0) return ErrnoStatus(absl::StrCat("chmod ", built));
      if (rename(built.c_str(), ImagePath(m.digest).c_str()) != 0) {
        return ErrnoStatus(absl::StrCat("rename ", built));
      }
      DSEC_RETURN_IF_ERROR(WriteFileAtomic(MetadataPath(m.digest), LayerMetadataToJson(m)));
    }
    state.refs[request.name + ":" + request.version] = m.digest;
    return SaveRefs(RefsPath(), state.refs);
  }();
  if (!build_dir.empty()) RemoveTree(build_dir).IgnoreError();
  if (!status.ok()) return status;
  if (result.reused) result.write_bytes = 0;
  return result;
}

absl::StatusOr<std::string> LayerStore::Resolve(const std::string& ref) const {
  DSEC_ASSIGN_OR_RETURN(ScopedFd lock, Lock(JoinPath(root(), "lock"), /*exclusive=*/false));
  DSEC_ASSIGN_OR_RETURN(StoreState state, LoadState(RefsPath(), LayersDir()));
  return ResolveIn(state, ref);
}

absl::StatusOr<LayerInfo> LayerStore::Inspect(const std::string& ref) const {
  DSEC_ASSIGN_OR_RETURN(ScopedFd lock, Lock(JoinPath(root(), "lock"), /*exclusive=*/false));
  DSEC_ASSIGN_OR_RETURN(StoreState state, LoadState(RefsPath(), LayersDir()));
  DSEC_ASSIGN_OR_RETURN(std::string digest, ResolveIn(state, ref));
  return LayerInfo{state.layers.at(digest), TagsOf(state, digest), ImagePath(digest)};
}

absl::StatusOr<std::vector<LayerInfo>> LayerStore::List() const {
  DSEC_ASSIGN_OR_RETURN(ScopedFd lock, Lock(JoinPath(root(), "lock"), /*exclusive=*/false));
  DSEC_ASSIGN_OR_RETURN(StoreState state, LoadState(RefsPath(), LayersDir()));
  std::vector<LayerInfo> out;
  for (const auto& [digest, m] : state.layers) {
    out.push_back(LayerInfo{m, TagsOf(state, digest), ImagePath(digest)});
  }
  std::sort(out.begin(), out.end(), [](const LayerInfo& a, const LayerInfo& b) {
    return std::tie(a.metadata.name, a.metadata.version, a.metadata.digest) <
           std::tie(b.metadata.name, b.metadata.version, b.metadata.digest);
  });
  return out;
}

absl::StatusOr<std::vector<LayerInfo>> LayerStore::Chain(const std::string& ref) const {
  DSEC_ASSIGN_OR_RETURN(ScopedFd lock, Lock(JoinPath(root(), "lock"), /*exclusive=*/false));
  DSEC_ASSIGN_OR_RETURN(StoreState state, LoadState(RefsPath(), LayersDir()));
  DSEC_ASSIGN_OR_RETURN(std::string top, ResolveIn(state, ref));
  std::vector<LayerInfo> out;
  std::set<std::string> seen;
  // Depth-first over parents, bottom first; the depth bound stops a corrupt
  // store with a parent cycle.
  std::function<absl::Status(const std::string&, int)> visit =
      [&](const std::string& d, int depth) -> absl::Status {
    if (depth > 128) return absl::InternalError("layer parent chain deeper than 128 (cycle?)");
    if (seen.count(d)) return absl::OkStatus();
    auto it = state.layers.find(d);
    if (it == state.layers.end()) return absl::NotFoundError(absl::StrCat("missing parent layer ", d));
    for (const auto& p : it->second.parents) DSEC_RETURN_IF_ERROR(visit(p, depth + 1));
    if (seen.insert(d).second) out.push_back(LayerInfo{it->second, TagsOf(state, d), ImagePath(d)});
    return absl::OkStatus();
  };
  DSEC_RETURN_IF_ERROR(visit(top, 0));
  return out;
}

absl::Status LayerStore::Remove(const std::string& ref) {
  DSEC_ASSIGN_OR_RETURN(ScopedFd lock, Lock(JoinPath(root(), "lock"), /*exclusive=*/true));
  DSEC_ASSIGN_OR_RETURN(StoreState state, LoadState(RefsPath(), LayersDir()));
  DSEC_ASSIGN_OR_RETURN(std::string digest, ResolveIn(state, ref));
  std::vector<std::string> children = ChildrenOf(state, digest);
  if (!children.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "layer ", ref, " is a parent of ", absl::StrJoin(children, ", "), "; remove those first"));
  }
  std::vector<std::string> pins;
  for (const auto& [tag, d] : state.refs) {
    if (d == digest && tag.rfind(kPinTagPrefix, 0) == 0) pins.push_back(tag);
  }
  if (!pins.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "layer ", ref, " is pinned by ", absl::StrJoin(pins, ", "),
        " (a snapshot stands on it: delete the snapshot first, or untag the pin)"));
  }
  for (auto it = state.refs.begin(); it != state.refs.end();) {
    it = it->second == digest ? state.refs.erase(it) : std::next(it);
  }
  DSEC_RETURN_IF_ERROR(SaveRefs(RefsPath(), state.refs));
  if (unlink(MetadataPath(digest).c_str()) != 0 && errno != ENOENT) {
    return ErrnoStatus(absl::StrCat("unlink ", MetadataPath(digest)));
  }
  if (unlink(ImagePath(digest).c_str()) != 0 && errno != ENOENT) {
    return ErrnoStatus(absl::StrCat("unlink ", ImagePath(digest)));
  }
  return absl::OkStatus();
}

absl::Status LayerStore::Tag(const std::string& ref, const std::string& name, const std::string& version) {
  if (!IsValidNameComponent(name) || !IsValidNameComponent(version)) {
    return absl::InvalidArgumentError(absl::StrCat("invalid tag ", name, ":", version));
  }
  DSEC_ASSIGN_OR_RETURN(ScopedFd lock, Lock(JoinPath(root(), "lock"), /*exclusive=*/true));
  DSEC_ASSIGN_OR_RETURN(StoreState state, LoadState(RefsPath(), LayersDir()));
  DSEC_ASSIGN_OR_RETURN(std::string digest, ResolveIn(state, ref));
  state.refs[absl::StrCat(name, ":", version)] = digest;
  return SaveRefs(RefsPath(), state.refs);
}

absl::Status LayerStore::Untag(const std::string& tag) {
  DSEC_ASSIGN_OR_RETURN(ScopedFd lock, Lock(JoinPath(root(), "lock"), /*exclusive=*/true));
  DSEC_ASSIGN_OR_RETURN(StoreState state, LoadState(RefsPath(), LayersDir()));
  if (state.refs.erase(tag) == 0) return absl::NotFoundError(absl::StrCat("no layer tagged ", tag));
  return SaveRefs(RefsPath(), state.refs);
}

absl::StatusOr<std::vector<std::string>> LayerStore::Gc() {
  DSEC_ASSIGN_OR_RETURN(ScopedFd lock, Lock(JoinPath(root(), "lock"), /*exclusive=*/true));
  DSEC_ASSIGN_OR_RETURN(StoreState state, LoadState(RefsPath(), LayersDir()));
  std::set<std::string> referenced;
  for (const auto& [tag, d] : state.refs) referenced.insert(d);
  std::vector<std::string> removed;
  for (bool changed = true; changed;) {
    changed = false;
    for (auto it = state.layers.begin(); it != state.layers.end();) {
      const std::string digest = it->first;
      if (referenced.count(digest) || !ChildrenOf(state, digest).empty()) {
        ++it;
        continue;
      }
      if (unlink(MetadataPath(digest).c_str()) != 0 && errno != ENOENT) {
        return ErrnoStatus(absl::StrCat("unlink ", MetadataPath(digest)));
      }
      if (unlink(ImagePath(digest).c_str()) != 0 && errno != ENOENT) {
        return ErrnoStatus(absl::StrCat("unlink ", ImagePath(digest)));
      }
      removed.push_back(digest);
      it = state.layers.erase(it);
      changed = true;
    }
  }
  // Images whose metadata never got written (a crash between the two).
  DSEC_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDirectory(LayersDir()));
  for (const auto& n : names) {
    bool image = n.size() == 64 + 6 && n.substr(64) == ".erofs";
    if (image && state.layers.count("sha256:" + n.substr(0, 64)) == 0) {
      unlink(JoinPath(LayersDir(), n).c_str());
    }
  }
  // Builds whose process died: their lock is free.
  DSEC_ASSIGN_OR_RETURN(std::vector<std::string> builds, ListDirectory(TmpDir()));
  for (const auto& b : builds) {
    std::string dir = JoinPath(TmpDir(), b);
    ScopedFd fd(open(JoinPath(dir, "lock").c_str(), O_RDWR | O_CLOEXEC));
    // No lock file yet: a build that is just starting.
    if (!fd.valid() || flock(fd.get(), LOCK_EX | LOCK_NB) != 0) continue;
    RemoveTree(dir).IgnoreError();
  }
  return removed;
}

}  // namespace dsec::layers
