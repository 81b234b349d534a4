// SPDX-License-Identifier: Apache-2.0
// The service's sandbox networking: GET's "network", PATCH .../network and
// the per-sandbox counters in /metrics.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status.h"
#include "sandbox/daemon/requests.h"
#include "sandbox/daemon/service.h"
#include "sandbox/daemon/service_internal.h"

namespace dsec::daemon {

using nlohmann::json;

json Service::NetworkJson(const Entry& e) {
  const std::shared_ptr<network::SandboxNetwork> net = e.Net();
  if (!net) return nullptr;
  json n = network::NetworkSpecJson(net->spec());
  // A container has one address; a fncall sandbox one per worker (none
  // between workers): "address" is the first, null without any.
  json addresses = json::array();
  for (uint32_t a : net->addresses()) addresses.push_back(network::Ipv4Text(a));
  n["address"] = addresses.empty() ? json(nullptr) : addresses[0];
  n["addresses"] = std::move(addresses);
  n["gateway"] = net->gateway_text();
  n["nameserver"] = net->gateway_text();
  absl::StatusOr<network::NetworkCounters> c = net->Counters();
  if (c.ok()) {
    n["counters"] = {{"bytes_out", c->bytes_out},
                     {"bytes_in", c->bytes_in},
                     {"connects_allowed", c->connects_allowed},
                     {"connects_denied", c->connects_denied},
                     {"packets_dropped", c->packets_dropped}};
  } else {
    n["counters"] = nullptr;  // being destroyed
  }
  return n;
}

absl::StatusOr<json> Service::SetNetwork(const std::string& id, const json& body) {
  DSEC_ASSIGN_OR_RETURN(network::NetworkSpec spec, ParseNetworkPatch(body));
  DSEC_ASSIGN_OR_RETURN(std::shared_ptr<Entry> e, Find(id));
  if (!e->Net()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "sandbox ", id, " has no network: a sandbox gets one at create (\"network\")"));
  }
  // Not under the entry's lock: a policy change must not wait for a
  // running exec (cutting a sandbox off while its command runs is the
  // point). The network object serialises its own changes.
  const std::shared_ptr<network::SandboxNetwork> net = e->Net();
  absl::Status s = net->SetSpec(spec);
  if (absl::IsFailedPrecondition(s)) return absl::NotFoundError(absl::StrCat("no sandbox ", id));
  DSEC_RETURN_IF_ERROR(s);
  {
    std::lock_guard<std::mutex> lock(e->net_mu);
    e->network_spec = std::make_shared<const network::NetworkSpec>(std::move(spec));
  }
  return Describe(*e);
}

std::string Service::NetworkMetricsText() const {
  std::vector<std::pair<std::string, std::shared_ptr<network::SandboxNetwork>>> nets;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, e] : sandboxes_) {
      if (auto net = e->Net()) nets.emplace_back(id, std::move(net));
    }
  }
  struct Metric {
    const char* name;
    const char* help;
    uint64_t network::NetworkCounters::*field;
  };
  static constexpr Metric kMetrics[] = {
      {"dsec_sandbox_network_bytes_out_total", "Bytes a sandbox sent.", &network::NetworkCounters::bytes_out},
      {"dsec_sandbox_network_bytes_in_total", "Bytes a sandbox received.", &network::NetworkCounters::bytes_in},
      {"dsec_sandbox_network_connects_allowed_total", "Connects and sends its egress policy let through.",
       &network::NetworkCounters::connects_allowed},
      {"dsec_sandbox_network_connects_denied_total", "Connects and sends its egress policy refused (EPERM).",
       &network::NetworkCounters::connects_denied},
      {"dsec_sandbox_network_packets_dropped_total", "Packets the policy's second wall dropped (raw, ICMP).",
       &network::NetworkCounters::packets_dropped},
  };
  std::vector<std::pair<std::string, network::NetworkCounters>> values;
  for (const auto& [id, net] : nets) {
    absl::StatusOr<network::NetworkCounters> c = net->Counters();
    if (c.ok()) values.emplace_back(id, *c);
  }
  std::string out;
  for (const Metric& m : kMetrics) {
    absl::StrAppendFormat(&out, "# HELP %s %s\n# TYPE %s counter\n", m.name, m.help, m.name);
    for (const auto& [id, c] : values) {
      absl::StrAppendFormat(&out, "%s{sandbox=\"%s\"} %d\n", m.name, id, c.*(m.field));
    }
  }
  return out;
}

}  // namespace dsec::daemon
