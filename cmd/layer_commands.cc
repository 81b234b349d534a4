// SPDX-License-Identifier: Apache-2.0
// `dsec-vmm layer ...`: build, list, inspect, remove and garbage-collect
// layers in the store. Exit status: 0 done, 1 failed, 2 bad arguments or
// reference, 3 no such layer, 4 refused (a layer is another's parent).
#include "cmd/layer_commands.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "bench/layers_bench.h"
#include "nlohmann/json.hpp"
#include "sandbox/layers/layer_store.h"
#include "sandbox/layers/pack_diff.h"

namespace dsec::cmd {
namespace {

struct LayerArgs {
  std::string store;
  bool json = false;
  // build
  std::string dir;
  std::string name;
  std::string version;
  std::vector<std::string> parents;
  std::string source;
  bool upper = false;
  bool userxattr = false;
  std::string compress = layers::kNoCompression;
  // inspect, rm
  std::string ref;
};

int ExitFor(const absl::Status& s, const char* what) {
  std::fprintf(stderr, "dsec-vmm layer %s: %s\n", what, std::string(s.message()).c_str());
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument: return 2;
    case absl::StatusCode::kNotFound: return 3;
    case absl::StatusCode::kFailedPrecondition: return 4;
    default: return 1;
  }
}

nlohmann::json InfoJson(const layers::LayerInfo& info) {
  const layers::LayerMetadata& m = info.metadata;
  return {{"name", m.name},       {"version", m.version},   {"digest", m.digest},
          {"parents", m.parents}, {"size", m.size},         {"content_bytes", m.content_bytes},
          {"entries", m.entries}, {"created", m.created},   {"source", m.source},
          {"tags", info.tags},    {"image", info.image_path},
          {"compression", m.compression},
          // pmem-dax maps only uncompressed images with DAX (pmem-dax/README.md).
          {"dax_capable", !layers::IsCompressed(m.compression)}};
}

std::string DefaultStore() {
  const char* env = std::getenv("DSEC_LAYER_STORE");
  return env != nullptr && *env != '\0' ? env : layers::kDefaultStoreRoot;
}

int Build(const LayerArgs& a) {
  auto store = layers::LayerStore::Create(a.store);
  if (!store.ok()) return ExitFor(store.status(), "build");
  // Before the tree walk: a compressor this mkfs.erofs lacks is a usage error.
  absl::Status compress_ok = layers::CheckCompressionAvailable(a.compress);
  if (!compress_ok.ok()) return ExitFor(compress_ok, "build");
  layers::BuildRequest req{a.name, a.version, a.parents, a.source, a.compress};
  absl::StatusOr<layers::BuildResult> r;
  if (a.upper) {
    layers::PackDiffOptions opts;
    if (a.userxattr) opts.upper_xattr_prefix = "user.overlay.";
    r = layers::PackDiff(*store, a.dir, req, opts);
  } else {
    r = store->Build(a.dir, req);
  }
  if (!r.ok()) return ExitFor(r.status(), "build");
  if (a.json) {
    nlohmann::json j = InfoJson({r->layer, {a.name + ":" + a.version}, store->ImagePath(r->layer.digest)});
    j["reused"] = r->reused;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("%s:%s %s (%s, %llu bytes, compression %s)\n", a.name.c_str(), a.version.c_str(),
                r->layer.digest.c_str(), r->reused ? "already stored" : "built",
                static_cast<unsigned long long>(r->layer.size), r->layer.compression.c_str());
  }
  return 0;
}

int List(const LayerArgs& a) {
  auto store = layers::LayerStore::Create(a.store);
  if (!store.ok()) return ExitFor(store.status(), "ls");
  auto list = store->List();
  if (!list.ok()) return ExitFor(list.status(), "ls");
  if (a.json) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& info : *list) j.push_back(InfoJson(info));
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("%-24s %-19s %10s %-8s %-20s %s\n", "NAME:VERSION", "DIGEST", "SIZE", "COMPR", "CREATED",
              "TAGS");
  for (const auto& info : *list) {
    const auto& m = info.metadata;
    std::string tags;
    for (const auto& t : info.tags) tags += (tags.empty() ? "" : ",") + t;
    std::printf("%-24s %-19s %10llu %-8s %-20s %s\n", m.Tag().c_str(), m.digest.substr(0, 19).c_str(),
                static_cast<unsigned long long>(m.size), m.compression.c_str(), m.created.c_str(),
                tags.empty() ? "(untagged)" : tags.c_str());
  }
  return 0;
}

int Inspect(const LayerArgs& a) {
  auto store = layers::LayerStore::Create(a.store);
  if (!store.ok()) return ExitFor(store.status(), "inspect");
  auto info = store->Inspect(a.ref);
  if (!info.ok()) return ExitFor(info.status(), "inspect");
  nlohmann::json j = InfoJson(*info);
  auto chain = store->Chain(a.ref);
  if (!chain.ok()) return ExitFor(chain.status(), "inspect");
  nlohmann::json images = nlohmann::json::array();
  for (const auto& c : *chain) images.push_back(c.image_path);
  j["chain_images"] = images;  // bottom first
  std::printf("%s\n", j.dump(2).c_str());
  return 0;
}

int Remove(const LayerArgs& a) {
  auto store = layers::LayerStore::Create(a.store);
  if (!store.ok()) return ExitFor(store.status(), "rm");
  absl::Status s = store->Remove(a.ref);
  if (!s.ok()) return ExitFor(s, "rm");
  std::printf("removed %s\n", a.ref.c_str());
  return 0;
}

int Gc(const LayerArgs& a) {
  auto store = layers::LayerStore::Create(a.store);
  if (!store.ok()) return ExitFor(store.status(), "gc");
  auto removed = store->Gc();
  if (!removed.ok()) return ExitFor(removed.status(), "gc");
  if (a.json) {
    std::printf("%s\n", nlohmann::json{{"removed", *removed}}.dump().c_str());
  } else {
    for (const auto& d : *removed) std::printf("removed %s\n", d.c_str());
    std::printf("gc: %zu layer(s) removed\n", removed->size());
  }
  return 0;
}

}  // namespace

void RegisterLayerCommands(CLI::App& app, CommandRegistry& registry) {
  auto args = std::make_shared<LayerArgs>();
  args->store = DefaultStore();
  CLI::App* layer = app.add_subcommand("layer", "EROFS layer store: build, ls, inspect, rm, gc");
  layer->require_subcommand(1);
  layer->add_option("--store", args->store, "Store root (env DSEC_LAYER_STORE)")->capture_default_str();

  CLI::App* build = layer->add_subcommand("build", "Build a layer from a directory (or an overlay upper)");
  build->add_option("dir", args->dir, "Source tree, or an overlayfs upper directory with --upper")
      ->required()
      ->check(CLI::ExistingDirectory);
  build->add_option("--name", args->name, "Layer name, e.g. base")->required();
  build->add_option("--version", args->version, "Layer version, e.g. bookworm")->required();
  build->add_option("--parent", args->parents, "Layer below this one (repeat, bottom first)");
  build->add_option("--source", args->source, "Provenance recorded in metadata");
  build->add_flag("--upper", args->upper, "DIR is an overlay upper: pack it as a diff layer (pack_diff)");
  build->add_flag("--userxattr", args->userxattr, "With --upper: the overlay used userxattr");
  build->add_option("--compress", args->compress,
                    "Image data compression: none (DAX-capable, for microVM pmem layers) or a mkfs.erofs "
                    "compressor, ALG[,LEVEL], e.g. lz4 or lz4hc (container tier only)")
      ->capture_default_str();
  build->add_flag("--json", args->json, "Print the layer as JSON");
  registry.Add(build, [args] { return Build(*args); });

  CLI::App* ls = layer->add_subcommand("ls", "List stored layers");
  ls->add_flag("--json", args->json, "Print JSON");
  registry.Add(ls, [args] { return List(*args); });

  CLI::App* inspect = layer->add_subcommand("inspect", "Print a layer's metadata as JSON");
  inspect->add_option("ref", args->ref, "name:version, name, sha256:<hex> or a hex prefix")->required();
  registry.Add(inspect, [args] { return Inspect(*args); });

  CLI::App* rm = layer->add_subcommand("rm", "Remove a layer (refused while another layer builds on it or a snapshot pins it)");
  rm->add_option("ref", args->ref, "name:version, name, sha256:<hex> or a hex prefix")->required();
  registry.Add(rm, [args] { return Remove(*args); });

  CLI::App* gc = layer->add_subcommand("gc", "Remove untagged layers nothing builds on");
  gc->add_flag("--json", args->json, "Print JSON");
  registry.Add(gc, [args] { return Gc(*args); });
}

void RegisterLayerBenchCommands(CLI::App* bench, CommandRegistry& registry) {
  auto opts = std::make_shared<bench::LayersBenchOptions>();
  CLI::App* layers_cmd = bench->add_subcommand(
      "layers", "Build and unpack the same trees as EROFS layers and as tar.gz archives");
  layers_cmd->add_flag("--json", opts->json, "Print one JSON object");
  layers_cmd->add_option("--work-dir", opts->work_dir, "Scratch directory (not tmpfs)")
      ->capture_default_str()
      ->check(CLI::ExistingDirectory);
  layers_cmd->add_option("--mib", opts->total_mib, "Generated content across the three layers")
      ->capture_default_str()
      ->check(CLI::Range(1, 16384));
  layers_cmd->add_option("--seed", opts->seed, "Tree generator seed")->capture_default_str();
  layers_cmd->add_option("--compress", opts->compression,
                         "Compressor of the compressed EROFS variant, ALG[,LEVEL] (default: lz4 if "
                         "mkfs.erofs offers it; lz4hc builds far slower for slightly smaller images)");
  registry.Add(layers_cmd, [opts] { return bench::RunLayersBench(*opts); });
}

}  // namespace dsec::cmd
