// SPDX-License-Identifier: Apache-2.0
#include "sandbox/daemon/daemon_testing.h"

#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "sandbox/container/container_tier.h"
#include "sandbox/container/test_image.h"
#include "sandbox/fncall/fncall_testing.h"
#include "sandbox/fncall/fncall_tier.h"
#include "sandbox/layers/layer_store.h"
#include "base/status.h"

namespace dsec::daemon::testing {

absl::Status BuildBusyboxLayer(const std::string& store_root, const std::string& work_dir) {
  const std::string tree = absl::StrCat(work_dir, "/bb-tree");
  DSEC_RETURN_IF_ERROR(container::testing::BuildBusyboxTree(tree));
  DSEC_ASSIGN_OR_RETURN(layers::LayerStore store, layers::LayerStore::Create(store_root));
  const layers::BuildRequest req{std::string("bb"), std::string("1"), {}, std::string()};
  return store.Build(tree, req).status();
}

LayerResolver StoreResolver(const std::string& store_root, const std::string& fncall_image) {
  return [store_root, fncall_image](const std::string& tier, const std::vector<std::string>& refs)
             -> absl::StatusOr<std::vector<std::string>> {
    DSEC_ASSIGN_OR_RETURN(layers::LayerStore store, layers::LayerStore::Create(store_root));
    std::vector<std::string> images;
    auto add = [&images](const std::string& image) {
      if (std::find(images.begin(), images.end(), image) == images.end()) images.push_back(image);
    };
    for (const std::string& ref : refs) {
      // The tiers' default layers stand for what the test built: the
      // busybox layer for base:bookworm (the fncall image brings its own
      // root), the fncall image for python:1.
      if (ref == "base:bookworm" && tier == "fncall") continue;
      if (ref == "python:1") {
        add(fncall_image);
        continue;
      }
      const std::string want = ref == "base:bookworm" ? "bb:1" : ref;
      DSEC_ASSIGN_OR_RETURN(std::vector<layers::LayerInfo> chain, store.Chain(want));
      for (const layers::LayerInfo& l : chain) add(l.image_path);
    }
    return images;
  };
}

absl::StatusOr<std::unique_ptr<LocalDaemon>> LocalDaemon::Start(const std::string& run_dir,
                                                                const std::string& store,
                                                                ServiceOptions so, HttpOptions ho) {
  for (const char* sub : {"", "/ctr", "/fn"}) {
    const std::string dir = run_dir + sub;
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return ErrnoToStatus("mkdir " + dir);
  }
  std::string fncall_image;
  if (auto l = fncall::testing::EnsureTestLayers(); l.ok()) fncall_image = l->runtime;
  so.resolve_layers = StoreResolver(store, fncall_image);
  if (so.layer_store.empty()) so.layer_store = store;
  std::vector<std::unique_ptr<tier::Tier>> tiers;
  tiers.push_back(std::make_unique<container::ContainerTier>(
      container::ContainerTierOptions{run_dir + "/ctr", 16 << 20}));
  fncall::FncallTierOptions fo;
  fo.state_root = run_dir + "/fn";
  fo.max_workers_per_pool = 2;
  tiers.push_back(std::make_unique<fncall::FncallTier>(fo));
  DSEC_ASSIGN_OR_RETURN(std::unique_ptr<trajectory::TrajectoryStore> trajectories,
                        trajectory::TrajectoryStore::Open(run_dir + "/trj", {}));
  std::unique_ptr<LocalDaemon> d(new LocalDaemon());
  d->service_ = std::make_unique<Service>(std::move(so), std::move(tiers), std::move(trajectories));
  ho.socket_path = run_dir + "/api/api.sock";
  d->socket_ = ho.socket_path;
  DSEC_ASSIGN_OR_RETURN(d->server_, HttpServer::Start(d->service_.get(), ho));
  return d;
}

LocalDaemon::~LocalDaemon() {
  if (server_) server_->Stop();
  server_.reset();
  service_.reset();
}

std::unique_ptr<httplib::Client> UnixClient(const std::string& socket_path) {
  auto c = std::make_unique<httplib::Client>(socket_path);
  c->set_address_family(AF_UNIX);
  c->set_read_timeout(60, 0);
  c->set_write_timeout(60, 0);
  return c;
}

nlohmann::json JsonOf(const httplib::Result& r) {
  if (!r) return nullptr;
  nlohmann::json j = nlohmann::json::parse(r->body, nullptr, false);
  return j.is_discarded() ? nlohmann::json(nullptr) : j;
}

}  // namespace dsec::daemon::testing
