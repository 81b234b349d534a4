// SPDX-License-Identifier: Apache-2.0
#include "sandbox/layers/layer_refs.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "sandbox/layers/erofs_image.h"
#include "sandbox/layers/layer_store.h"
#include "base/status.h"
#include "base/subprocess.h"

namespace dsec::layers {

namespace {

bool IsRegularFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool OnPath(const std::string& tool) {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string candidate = absl::StrCat(dirs.substr(start, end - start), "/", tool);
    if (end > start && ::access(candidate.c_str(), X_OK) == 0) return true;
    start = end + 1;
  }
  // debootstrap lives in /usr/sbin, which a user's PATH may lack.
  return ::access(absl::StrCat("/usr/sbin/", tool).c_str(), X_OK) == 0;
}

// A client's image path (LayerRefOptions::untrusted_args): the path as
// given must lie under an allowed directory before anything about the file
// is looked up (so that a refusal says nothing of what exists elsewhere),
// and again once links are resolved.
absl::StatusOr<std::string> AllowedImagePath(const std::string& arg, const std::vector<std::string>& dirs) {
  auto refused = [&arg](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("layer image ", arg, " ", why));
  };
  if (arg[0] != '/') return refused("is not an absolute path (or a store reference)");
  for (absl::string_view part : absl::StrSplit(arg, '/')) {
    if (part == "." || part == "..") return refused("has a '.' or '..' component");
  }
  auto under = [&dirs](const std::string& path) {
    return std::any_of(dirs.begin(), dirs.end(), [&path](const std::string& d) {
      return path.size() > d.size() + 1 && path.compare(0, d.size(), d) == 0 &&
             (d == "/" || path[d.size()] == '/');
    });
  };
  const char* kNotAllowed = "is not in a directory this node takes layer images from (use a layer store reference)";
  if (!under(arg)) return refused(kNotAllowed);
  char real[PATH_MAX];
  if (::realpath(arg.c_str(), real) == nullptr) {
    if (errno == ENOENT || errno == ENOTDIR) return absl::NotFoundError(absl::StrCat("layer image ", arg, " does not exist"));
    return refused(absl::StrCat("cannot be resolved (", strerror(errno), ")"));
  }
  if (!under(real)) return refused(kNotAllowed);
  if (!IsRegularFile(real)) return refused("is not a regular file");
  if (!CheckErofsImage(real).ok()) return refused("is not an EROFS image");
  return std::string(real);
}

absl::Status BuildDefaultLayer(const LayerRefOptions& o) {
  const std::string hint = absl::StrCat(
      "build it with tools/build-base-layer.sh --store ", o.store_root,
      " (root, debootstrap and access to the Debian archive), or pass --layers IMAGE|REF");
  if (o.build_script.empty() || ::access(o.build_script.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("the default layer ", kDefaultBaseLayer, " is not in the store ", o.store_root,
                     " and tools/build-base-layer.sh was not found; ", hint));
  }
  if (!OnPath("debootstrap")) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the default layer ", kDefaultBaseLayer, " is not in the store ", o.store_root,
        " and debootstrap is not installed (apt-get install debootstrap); ", hint));
  }
  std::fprintf(o.progress, "dsec-vmm: building base layer %s (first use, ~1-2 min)...\n",
               kDefaultBaseLayer);
  DSEC_ASSIGN_OR_RETURN(int code, RunBuildScript(o, {"--store", o.store_root}));
  if (code != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "building the default layer ", kDefaultBaseLayer, " failed (", o.build_script,
        " exited ", code, "; its output is above: without a cached tree it needs network "
        "access to the Debian archive); ", hint));
  }
  std::fprintf(o.progress, "dsec-vmm: base layer %s built into %s\n", kDefaultBaseLayer,
               o.store_root.c_str());
  return absl::OkStatus();
}

// `build-base-layer.sh --store STORE --toolkit python 1 python3`.
absl::Status BuildPythonToolkit(const LayerRefOptions& o) {
  if (o.build_script.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the ", kPythonToolkitLayer,
        " layer is missing and tools/build-base-layer.sh was not found (set DSEC_BASE_LAYER_SCRIPT)"));
  }
  std::fprintf(o.progress, "dsec-vmm: building the %s toolkit layer (apt-get install python3 over "
               "%s; once)\n", kPythonToolkitLayer, kDefaultBaseLayer);
  DSEC_ASSIGN_OR_RETURN(int code, RunBuildScript(o, {"--store", o.store_root, "--toolkit", "python",
                                                      "1", "python3"}));
  if (code != 0) {
    return absl::FailedPreconditionError(absl::StrCat("building the ", kPythonToolkitLayer,
                                                      " layer failed (exit status ", code,
                                                      "); see the output above"));
  }
  return absl::OkStatus();
}

}  // namespace

LayerRefOptions LayerRefOptionsFor(const std::string& store_root, const std::string& dsec_vmm) {
  LayerRefOptions o;
  o.store_root = store_root;
  o.dsec_vmm = dsec_vmm;
  o.build_script = FindBaseLayerScript(dsec_vmm);
  return o;
}

absl::StatusOr<std::vector<std::string>> ResolveFncallLayers(const std::string& lang,
                                                             const std::vector<std::string>& layers,
                                                             const LayerRefOptions& o) {
  if (!layers.empty()) return ResolveLayerRefs(layers, o);
  // The base layer, built on first use.
  DSEC_ASSIGN_OR_RETURN(std::vector<std::string> base, ResolveLayerRefs({}, o));
  if (lang != "python") return base;
  auto python = ResolveLayerRefs({kPythonToolkitLayer}, o);
  if (absl::IsNotFound(python.status())) {
    DSEC_RETURN_IF_ERROR(BuildPythonToolkit(o));
    python = ResolveLayerRefs({kPythonToolkitLayer}, o);
  }
  return python;
}

absl::StatusOr<int> RunBuildScript(const LayerRefOptions& o, const std::vector<std::string>& args) {
  SpawnOptions spawn;
  spawn.argv = {o.build_script};
  spawn.argv.insert(spawn.argv.end(), args.begin(), args.end());
  spawn.env = {o.dsec_vmm.empty() ? "DSEC_VMM" : absl::StrCat("DSEC_VMM=", o.dsec_vmm)};
  std::fflush(o.progress);
  spawn.out = Stdio::Fd(::fileno(o.progress));
  spawn.err = Stdio::SameAsStdout();
  auto r = RunSubprocess(spawn);
  if (!r.ok()) return Annotate(r.status(), "running the layer build script");
  return r->signal != 0 ? 128 + r->signal : r->exit_code;
}

absl::StatusOr<std::vector<std::string>> CanonicalImageDirs(const std::vector<std::string>& dirs) {
  std::vector<std::string> out;
  for (const std::string& d : dirs) {
    char real[PATH_MAX];
    struct stat st;
    if (d.empty() || d[0] != '/' || ::realpath(d.c_str(), real) == nullptr || ::stat(real, &st) != 0 ||
        !S_ISDIR(st.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat("layer image directory ", d, " is not an existing absolute directory"));
    }
    out.push_back(real);
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> ResolveLayerRefs(
    const std::vector<std::string>& args, const LayerRefOptions& o) {
  std::vector<std::string> images;
  auto add = [&images](const std::string& image) {
    if (std::find(images.begin(), images.end(), image) == images.end()) images.push_back(image);
  };
  std::vector<std::string> refs = args;
  if (refs.empty()) refs.push_back(kDefaultBaseLayer);
  std::optional<layers::LayerStore> store;
  for (const std::string& ref : refs) {
    if (ref.empty()) return absl::InvalidArgumentError("empty layer argument");
    if (o.untrusted_args && ref.find('/') != std::string::npos) {
      DSEC_ASSIGN_OR_RETURN(std::string image, AllowedImagePath(ref, o.image_dirs));
      add(image);
      continue;
    }
    if (!o.untrusted_args && IsRegularFile(ref)) {
      add(ref);
      continue;
    }
    if (ref.find('/') != std::string::npos) {
      return absl::NotFoundError(absl::StrCat("layer image ", ref, " does not exist"));
    }
    const std::string in_store = o.untrusted_args ? "" : absl::StrCat(" (store ", o.store_root, ")");
    if (!store) {
      auto s = layers::LayerStore::Create(o.store_root);
      if (!s.ok()) return Annotate(s.status(), absl::StrCat("layer store", in_store));
      store.emplace(std::move(*s));
    }
    auto chain = store->Chain(ref);
    if (!chain.ok() && absl::IsNotFound(chain.status()) &&
        ref == kDefaultBaseLayer) {
      DSEC_RETURN_IF_ERROR(BuildDefaultLayer(o));
      chain = store->Chain(ref);
    }
    if (!chain.ok()) {
      return Annotate(chain.status(), absl::StrCat("layer ", ref, in_store));
    }
    for (const layers::LayerInfo& info : *chain) add(info.image_path);
  }
  return images;
}

std::string FindBaseLayerScript(const std::string& self_exe) {
  if (const char* env = std::getenv("DSEC_BASE_LAYER_SCRIPT"); env != nullptr && *env != '\0') {
    return env;
  }
  std::vector<std::string> candidates;
  size_t slash = self_exe.rfind('/');
  if (slash != std::string::npos) {
    std::string dir = self_exe.substr(0, slash);
    candidates.push_back(dir + "/../tools/build-base-layer.sh");
    candidates.push_back(dir + "/../share/dsec-vmm/build-base-layer.sh");
  }
  candidates.push_back("/usr/local/share/dsec-vmm/build-base-layer.sh");
  candidates.push_back("/usr/share/dsec-vmm/build-base-layer.sh");
#ifdef DSEC_SOURCE_DIR
  candidates.push_back(DSEC_SOURCE_DIR "/tools/build-base-layer.sh");
#endif
  for (const std::string& c : candidates) {
    if (::access(c.c_str(), X_OK) == 0) return c;
  }
  return "";
}

}  // namespace dsec::layers
