// SPDX-License-Identifier: Apache-2.0
#include "sandbox/daemon/daemon_testing.h"

#include <sys/socket.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "sandbox/container/test_image.h"
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
