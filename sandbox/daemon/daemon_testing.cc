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
  return [store_root, fncall_image](const std::string& tier, const std::string&,
                                    const std::vector<std::string>& refs)
             -> absl::StatusOr<std::vector<std::string>> {
    if (refs.empty() && tier == "fncall") return std::vector<std::string>{fncall_image};
    DSEC_ASSIGN_OR_RETURN(layers::LayerStore store, layers::LayerStore::Create(store_root));
    std::vector<std::string> images;
    std::vector<std::string> want = refs;
    if (want.empty()) want.emplace_back("bb:1");
    for (const std::string& ref : want) {
      DSEC_ASSIGN_OR_RETURN(std::vector<layers::LayerInfo> chain, store.Chain(ref));
      for (const layers::LayerInfo& l : chain) {
        if (std::find(images.begin(), images.end(), l.image_path) == images.end()) images.push_back(l.image_path);
      }
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
