// SPDX-License-Identifier: Apache-2.0
// Layer arguments of a sandbox (`dsec-vmm sandbox run --layers`, the
// daemon's and the microvm benchmark's defaults): image paths or layer-store
// references, and the default base layer (and the fncall tier's python
// toolkit) built on first use.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dsec::layers {

// The layer a sandbox gets when `sandbox run` names none.
inline constexpr char kDefaultBaseLayer[] = "base:bookworm";
// The toolkit the fncall tier's python calls stack on the base layer:
// `build-base-layer.sh --toolkit python 1 python3`.
inline constexpr char kPythonToolkitLayer[] = "python:1";

struct LayerRefOptions {
  std::string store_root;    // the layer store (--store / DSEC_LAYER_STORE / default)
  // Builds the default layer when the store lacks it: run as
  // `SCRIPT --store ROOT` with DSEC_VMM=`dsec_vmm` in its environment,
  // stdout and stderr on `progress`. "" = not available (error).
  std::string build_script;
  std::string dsec_vmm;      // this binary, for the script's `layer build`
  FILE* progress = stderr;
  // Who names the layers. The CLI's user (false): any image file, relative
  // paths too, and errors name the store. A daemon's clients (true): an
  // argument with a '/' is an image path, which must be absolute, hold no
  // "." or ".." component, lie under one of `image_dirs` (after links are
  // resolved too) and start with an EROFS superblock; any other argument is
  // a store reference (never a file of the daemon's working directory);
  // errors name no host path but the argument itself.
  bool untrusted_args = false;
  std::vector<std::string> image_dirs;  // absolute, links resolved (CanonicalImageDirs)
};

// `dirs` made absolute and free of links (realpath), each an existing
// directory. InvalidArgument naming the one that is not.
absl::StatusOr<std::vector<std::string>> CanonicalImageDirs(const std::vector<std::string>& dirs);

// Options for the dsec-vmm binary at `dsec_vmm` (this process's, or the
// one beside the daemon): the store, and the build script found for it.
LayerRefOptions LayerRefOptionsFor(const std::string& store_root, const std::string& dsec_vmm);

// Turns `--layers` arguments into EROFS image paths, lowest first. An
// argument naming an existing file is an image path (for untrusted_args:
// see above); anything else is a
// store reference (name:version, name, sha256:<hex>, hex prefix) expanded to
// its chain, bottom first (a toolkit brings its base). An image already in
// the list is not repeated (the first place wins). No arguments: the chain
// of kDefaultBaseLayer, which is built first (with a progress line) if the
// store does not hold it. Errors: NotFound (no such file or layer),
// InvalidArgument (bad reference), FailedPrecondition (the default layer is
// missing and cannot be built: no script, no debootstrap, no network),
// Internal.
absl::StatusOr<std::vector<std::string>> ResolveLayerRefs(
    const std::vector<std::string>& args, const LayerRefOptions& options);

// The fncall tier's layers for `lang` ("python" or "bash"), lowest first:
// `layers` resolved as above when given; else kDefaultBaseLayer and, for
// python, kPythonToolkitLayer, each built on first use (progress on
// `options.progress`). Errors as ResolveLayerRefs; a toolkit that cannot be
// built is FailedPrecondition.
absl::StatusOr<std::vector<std::string>> ResolveFncallLayers(const std::string& lang,
                                                             const std::vector<std::string>& layers,
                                                             const LayerRefOptions& options);

// Runs `options.build_script ARGS...` (tools/build-base-layer.sh) with
// DSEC_VMM=`options.dsec_vmm` added to this process's environment, stdin on
// /dev/null, stdout and stderr on `options.progress`; blocks until it ends.
// Returns its exit status (128 + N when killed by signal N); an error only
// when it cannot be started.
absl::StatusOr<int> RunBuildScript(const LayerRefOptions& options, const std::vector<std::string>& args);

// tools/build-base-layer.sh for a binary at `self_exe`: $DSEC_BASE_LAYER_SCRIPT
// if set; else the first that exists of <exe dir>/../tools/ (a build
// directory inside a checkout), <exe dir>/../share/dsec-vmm/,
// /usr/local/share/dsec-vmm/, /usr/share/dsec-vmm/, and the checkout this
// binary was built from. "" if none.
std::string FindBaseLayerScript(const std::string& self_exe);

}  // namespace dsec::layers
