// SPDX-License-Identifier: Apache-2.0
#include "sandbox/network/dns/domain_rule.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace dsec::network::dns {
namespace {

constexpr size_t kMaxNameLength = 253;  // RFC 1035 2.3.4, as text without the root dot
constexpr size_t kMaxLabelLength = 63;

absl::Status Bad(std::string_view rule, std::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("domain rule \"", absl::CEscape(absl::string_view(rule.data(), rule.size())),
                   "\": ", absl::string_view(why.data(), why.size())));
}

bool IsLabelChar(char c) { return absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-'; }

// Checks host-name syntax of a lower-case name without a trailing dot and
// counts its labels. Returns an empty string if it is valid, else why not.
std::string_view NameProblem(std::string_view name, int* labels) {
  *labels = 0;
  if (name.empty()) return "empty name";
  if (name.size() > kMaxNameLength) return "name longer than 253 characters";
  bool last_all_digits = false;
  size_t start = 0;
  while (true) {
    const size_t dot = name.find('.', start);
    const std::string_view label =
        name.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (label.empty()) return "empty label";
    if (label.size() > kMaxLabelLength) return "label longer than 63 characters";
    if (label.front() == '-' || label.back() == '-') return "label starts or ends with '-'";
    last_all_digits = true;
    for (char c : label) {
      if (!IsLabelChar(c)) return "a label holds a character other than a-z, 0-9 and '-'";
      if (!absl::ascii_isdigit(c)) last_all_digits = false;
    }
    ++*labels;
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  if (last_all_digits) return "the last label is all digits (an address, not a name)";
  return {};
}

}  // namespace

absl::StatusOr<DomainRule> ParseDomainRule(std::string_view text) {
  std::string_view name = text;
  DomainRule rule;
  const size_t colon = text.rfind(':');
  if (colon != std::string_view::npos) {
    const std::string_view port = text.substr(colon + 1);
    name = text.substr(0, colon);
    if (port.empty() || port.size() > 5) return Bad(text, "port must be 1..65535");
    uint32_t value = 0;
    for (char c : port) {
      if (!absl::ascii_isdigit(c)) return Bad(text, "port must be 1..65535");
      value = value * 10 + static_cast<uint32_t>(c - '0');
    }
    if (value == 0 || value > 65535) return Bad(text, "port must be 1..65535");
    rule.port = static_cast<uint16_t>(value);
  }
  if (name.substr(0, 2) == "*.") {
    rule.wildcard = true;
    name.remove_prefix(2);
  }
  if (!name.empty() && name.back() == '.') name.remove_suffix(1);
  std::string lower(name);
  absl::AsciiStrToLower(&lower);
  int labels = 0;
  const std::string_view problem = NameProblem(lower, &labels);
  if (!problem.empty()) {
    if (lower.find('*') != std::string::npos)
      return Bad(text, "'*.' is allowed only as the whole first label");
    return Bad(text, problem);
  }
  // A wildcard's names are at least "x." longer than its pattern.
  if (rule.wildcard && lower.size() > kMaxNameLength - 2) {
    return Bad(text, "no name below it fits in 253 characters");
  }
  if (labels < 2) {
    return Bad(text, rule.wildcard ? "a wildcard needs a name of at least two labels after '*.'"
                                   : "a name needs at least two labels");
  }
  rule.pattern = std::move(lower);
  return rule;
}

std::string FormatDomainRule(const DomainRule& rule) {
  std::string out = absl::StrCat(rule.wildcard ? "*." : "", rule.pattern);
  if (rule.port != 0) absl::StrAppend(&out, ":", rule.port);
  return out;
}

bool Matches(const DomainRule& rule, std::string_view qname) {
  if (!qname.empty() && qname.back() == '.') qname.remove_suffix(1);
  if (qname.size() > kMaxNameLength) return false;
  std::string lower(qname);
  absl::AsciiStrToLower(&lower);
  // Escaped bytes and odd characters match nothing, however the rule reads.
  for (char c : lower) {
    if (!IsLabelChar(c) && c != '.') return false;
  }
  if (lower.empty() || lower.front() == '.' || lower.find("..") != std::string::npos) return false;
  if (!rule.wildcard) return lower == rule.pattern;
  const std::string_view name(lower);
  return name.size() > rule.pattern.size() + 1 && name.ends_with(rule.pattern) &&
         name[name.size() - rule.pattern.size() - 1] == '.';
}

}  // namespace dsec::network::dns
