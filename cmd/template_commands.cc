// SPDX-License-Identifier: Apache-2.0
// `dsec-vmm template add NAME --layers REF[,REF...] [--tier T] [--cpus N]
// [--memory-mib N] [--qos ls|be]`, `template rm NAME`, `template ls`: edit the template
// file the E2B API reads at each create (sandbox/e2b/templates.h; a
// running dsec-vmmd sees a change at its next create). The layers are
// store references, bottom first; they are resolved when a sandbox is made.
#include "cmd/template_commands.h"

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "sandbox/e2b/templates.h"
#include "sandbox/e2b/wire.h"

namespace dsec::cmd {

namespace {

struct TemplateArgs {
  std::string file = e2b::kDefaultTemplateFile;
  std::string name;
  std::vector<std::string> layers;
  std::string tier = "container";
  double cpus = 0;
  uint64_t memory_mib = 0;
  std::string qos;
};

int Fail(const std::string& what) {
  fprintf(stderr, "dsec-vmm template: %s\n", what.c_str());
  return 1;
}

}  // namespace

void RegisterTemplateCommands(CLI::App& app, CommandRegistry& registry) {
  auto a = std::make_shared<TemplateArgs>();
  CLI::App* t = app.add_subcommand("template", "The node's E2B templates (templateID -> layers)");
  t->require_subcommand(1);
  t->add_option("--file", a->file, "Template file (dsec-vmmd --e2b-templates)")->capture_default_str();
  CLI::App* add = t->add_subcommand("add", "Add or replace a template");
  add->add_option("name", a->name, "templateID")->required();
  add->add_option("--layers", a->layers, "Layer references, bottom first")->delimiter(',')->required();
  add->add_option("--tier", a->tier, "Tier its sandboxes run on")->capture_default_str();
  add->add_option("--cpus", a->cpus, "CPUs of its sandboxes (default: the tier's)");
  add->add_option("--memory-mib", a->memory_mib, "Memory of its sandboxes (default: the tier's)");
  add->add_option("--qos", a->qos, "QoS class of its sandboxes (ls|be; default: none)")
      ->check(CLI::IsMember({"ls", "be"}));
  registry.Add(add, [a] {
    if (absl::Status s = e2b::ValidateTemplateName(a->name); !s.ok()) return Fail(std::string(s.message()));
    auto all = e2b::ReadTemplateFile(a->file);
    if (!all.ok()) return Fail(std::string(all.status().message()));
    e2b::Template tmpl{a->name, a->tier, a->layers, std::nullopt, std::nullopt, std::nullopt};
    if (!a->qos.empty()) tmpl.qos = a->qos;
    if (a->cpus > 0) tmpl.cpus = a->cpus;
    if (a->memory_mib > 0) tmpl.memory_mib = a->memory_mib;
    (*all)[a->name] = tmpl;
    if (absl::Status s = e2b::WriteTemplateFile(a->file, *all); !s.ok()) return Fail(s.ToString());
    return 0;
  });
  CLI::App* rm = t->add_subcommand("rm", "Remove a template");
  rm->add_option("name", a->name, "templateID")->required();
  registry.Add(rm, [a] {
    auto all = e2b::ReadTemplateFile(a->file);
    if (!all.ok()) return Fail(std::string(all.status().message()));
    if (all->erase(a->name) == 0) return Fail("no template " + a->name);
    if (absl::Status s = e2b::WriteTemplateFile(a->file, *all); !s.ok()) return Fail(s.ToString());
    return 0;
  });
  CLI::App* ls = t->add_subcommand("ls", "List the templates (JSON)");
  registry.Add(ls, [a] {
    auto all = e2b::ReadTemplateFile(a->file);
    if (!all.ok()) return Fail(std::string(all.status().message()));
    printf("%s\n", e2b::TemplateFileJson(*all).dump(2).c_str());
    return 0;
  });
}

}  // namespace dsec::cmd
