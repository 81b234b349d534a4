// SPDX-License-Identifier: Apache-2.0
#include "sandbox/network/policy.h"

#include "absl/strings/str_cat.h"
#include "base/json_fields.h"
#include "base/status.h"

namespace dsec::network {
namespace {

// A rule that starts like an address (a digit, '[' or a ':' in it) is a
// CIDR rule; anything else is a domain rule. "*.x" and "pypi.org:443" have
// a letter or '*' first; "10.0.0.0/8" and "[::1]:80" do not. A name with a
// leading digit ("1e100.net") is tried as a domain when it does not parse as
// a CIDR rule.
absl::Status AddRule(const std::string& text, const std::string& field,
                     std::vector<bpf::EgressRule>* cidr, std::vector<dns::DomainRule>* domains) {
  const char c = text.empty() ? '\0' : text[0];
  const bool address_like = c == '[' || (c >= '0' && c <= '9') ||
                            (text.find(':') != text.rfind(':'));  // two colons: IPv6
  if (address_like) {
    absl::StatusOr<bpf::EgressRule> r = bpf::ParseEgressRule(text);
    if (r.ok()) {
      cidr->push_back(*r);
      return absl::OkStatus();
    }
    if (c == '[' || text.find('/') != std::string::npos || text.find(':') != text.rfind(':')) {
      return InvalidField(field, absl::StrCat(field, ": ", r.status().message()));
    }
  }
  absl::StatusOr<dns::DomainRule> d = dns::ParseDomainRule(text);
  if (!d.ok()) return InvalidField(field, absl::StrCat(field, ": ", d.status().message()));
  domains->push_back(*d);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<NetworkSpec> ParseNetworkSpec(const nlohmann::json& value, const std::string& path) {
  DSEC_ASSIGN_OR_RETURN(JsonFields top, JsonFields::Of(value, path));
  NetworkSpec spec;
  if (const nlohmann::json* egress = top.Raw("egress")) {
    DSEC_ASSIGN_OR_RETURN(JsonFields e, JsonFields::Of(*egress, top.Path("egress")));
    DSEC_ASSIGN_OR_RETURN(std::optional<std::vector<std::string>> allow,
                          e.OptStringList("allow", kMaxRulesPerList, 260));
    DSEC_ASSIGN_OR_RETURN(std::optional<std::vector<std::string>> deny,
                          e.OptStringList("deny", kMaxRulesPerList, 260));
    DSEC_RETURN_IF_ERROR(e.RejectUnknown());
    EgressSpec& out = spec.egress;
    if (allow) {
      for (size_t i = 0; i < allow->size(); ++i) {
        DSEC_RETURN_IF_ERROR(AddRule((*allow)[i], JsonFields::ItemPath(e.Path("allow"), i),
                                     &out.allow, &out.allow_domains));
      }
      out.allow_text = *allow;
    }
    if (deny) {
      for (size_t i = 0; i < deny->size(); ++i) {
        DSEC_RETURN_IF_ERROR(AddRule((*deny)[i], JsonFields::ItemPath(e.Path("deny"), i),
                                     &out.deny, &out.deny_domains));
      }
      out.deny_text = *deny;
    }
  }
  DSEC_RETURN_IF_ERROR(top.RejectUnknown());
  return spec;
}

nlohmann::json NetworkSpecJson(const NetworkSpec& spec) {
  return {{"egress", {{"allow", spec.egress.allow_text}, {"deny", spec.egress.deny_text}}}};
}

}  // namespace dsec::network
