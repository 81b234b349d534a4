// SPDX-License-Identifier: Apache-2.0
// The layer store: content-addressed EROFS images with metadata and tags
// under one root directory.
//
//   <root>/lock                 flock: shared for reads, exclusive for changes
//   <root>/refs.json            {"refs": {"<name>:<version>": "sha256:<hex>"}}
//   <root>/layers/<hex>.erofs   the image (read-only, never rewritten)
//   <root>/layers/<hex>.json    its LayerMetadata; a layer exists iff this does
//   <root>/tmp/                 builds in progress (each holds its own flock)
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sandbox/layers/erofs_image.h"
#include "sandbox/layers/layer_metadata.h"

namespace dsec::layers {

inline constexpr char kDefaultStoreRoot[] = "/var/lib/dsec-vmm/layers";
// Tags whose name starts with this are holds (the daemon's snapshots tag
// every layer they stand on pin-<snapshot id>:<what>): like any tag they
// keep a layer from Gc, and Remove refuses a layer one points at.
inline constexpr char kPinTagPrefix[] = "pin-";

// Makes an image of a source tree: BuildErofsImage in production, a fake in
// unit tests. Returns bytes written.
using ImageBuilder = std::function<absl::StatusOr<uint64_t>(
    const std::string& src_dir, const std::string& image_path, const ErofsBuildOptions& options)>;

struct LayerStoreOptions {
  std::string root = kDefaultStoreRoot;
  ImageBuilder builder;  // empty: BuildErofsImage
  std::string mkfs = "mkfs.erofs";
};

struct BuildRequest {
  std::string name;
  std::string version;
  std::vector<std::string> parents;  // references (tag, digest, prefix), bottom first
  std::string source;                // recorded in metadata; default "dir:<src>"
  // kNoCompression (default: the image can be DAX-mapped by pmem-dax) or a
  // mkfs.erofs compressor spec such as "lz4hc" (erofs_image.h), recorded in
  // the metadata. A compressed layer's digest also covers the spec, so the
  // same tree built both ways gives two layers; uncompressed digests are
  // those of the tree alone, as before.
  std::string compression = kNoCompression;
  // The image's size at most (0: no limit): a larger one is removed before
  // it is committed (ResourceExhausted).
  uint64_t max_image_bytes = 0;
};

struct BuildResult {
  LayerMetadata layer;
  bool reused = false;         // an identical layer was already stored
  uint64_t write_bytes = 0;    // bytes mkfs.erofs wrote (0 when reused)
};

// A stored layer and the tags that point at it.
struct LayerInfo {
  LayerMetadata metadata;
  std::vector<std::string> tags;
  std::string image_path;
};

// Thread-compatible and process-safe: every call takes the store's file lock
// (shared to read, exclusive to change), so any number of LayerStore objects
// in any processes may use one root. The object only holds paths.
class LayerStore {
 public:
  // Creates the root's directories if missing.
  static absl::StatusOr<LayerStore> Create(LayerStoreOptions options);
  // Create with defaults (mkfs.erofs from PATH) at `root`.
  static absl::StatusOr<LayerStore> Create(const std::string& root) {
    LayerStoreOptions options;
    options.root = root;
    return Create(std::move(options));
  }

  const std::string& root() const { return options_.root; }

  // Builds a layer from `src_dir` and tags it name:version (moving the tag
  // if it pointed elsewhere; the old layer stays until Gc). An identical
  // tree with identical parents reuses the stored image. Parents must exist
  // (NotFound).
  absl::StatusOr<BuildResult> Build(const std::string& src_dir, const BuildRequest& request);

  // Accepts "name:version", "name" (when it has one version), "sha256:<hex>"
  // or a unique hex prefix of at least 8 digits. Returns the digest.
  absl::StatusOr<std::string> Resolve(const std::string& ref) const;
  absl::StatusOr<LayerInfo> Inspect(const std::string& ref) const;
  // All layers, sorted by name, version, digest.
  absl::StatusOr<std::vector<LayerInfo>> List() const;
  // The layer and all its ancestors, bottom first (the order to stack them:
  // overlayfs wants the reverse), each once.
  absl::StatusOr<std::vector<LayerInfo>> Chain(const std::string& ref) const;

  // Removes a layer and every tag pointing at it. FailedPrecondition if
  // another layer names it as a parent, or if a pin (a tag whose name
  // starts with kPinTagPrefix) points at it.
  absl::Status Remove(const std::string& ref);
  // Tags the layer `ref` names (Resolve's forms) name:version too, moving
  // the tag if it pointed elsewhere: a tag keeps a layer from Gc.
  // InvalidArgument for a malformed name or version, NotFound for `ref`.
  absl::Status Tag(const std::string& ref, const std::string& name, const std::string& version);
  // Removes one tag ("name:version"), leaving its layer (Gc takes a layer
  // no tag references). NotFound if no such tag.
  absl::Status Untag(const std::string& tag);
  // Removes layers that no tag references and no remaining layer depends on
  // (repeatedly, so unreferenced chains go too), images without metadata and
  // abandoned builds. Returns the removed digests.
  absl::StatusOr<std::vector<std::string>> Gc();

  // Path of a layer's image (whether or not it exists).
  std::string ImagePath(const std::string& digest) const;
  // The inverse: the digest ("sha256:<hex>") of a path ImagePath gives;
  // "" for any other path (an image from outside this store).
  std::string DigestOfImage(const std::string& path) const;

 private:
  explicit LayerStore(LayerStoreOptions options) : options_(std::move(options)) {}

  std::string LayersDir() const;
  std::string MetadataPath(const std::string& digest) const;
  std::string RefsPath() const;
  std::string TmpDir() const;

  LayerStoreOptions options_;
};

}  // namespace dsec::layers
