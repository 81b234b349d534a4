#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Tests of tools/check_layering.py on small trees made here: each rule it
enforces is shown to catch a violation, and a clean tree passes."""

import io
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_layering  # noqa: E402


class LayeringTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, path, text):
        full = os.path.join(self.root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, 'w', encoding='utf-8') as f:
            f.write(text)

    def component(self, path, rule, cmake=''):
        self.write(f'{path}/README.md', f'# {path}\n\nWhat it owns.\n\nMay depend on: {rule}.\n')
        self.write(f'{path}/CMakeLists.txt', cmake)

    def run_check(self, *extra):
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            rc = check_layering.main(['--root', self.root, *extra])
        return rc, out.getvalue() + err.getvalue()

    def base_tree(self):
        self.component('base', 'nothing of the tree (Abseil only)',
                       'dsec_cc_library(NAME dsec_base SRCS a.cc)\n')
        self.write('base/a.h', 'int A();\n')
        self.write('base/a.cc', '#include "base/a.h"\nint A() { return 1; }\n')
        self.component('lib/x', 'base (status)', 'dsec_cc_library(NAME dsec_x SRCS x.cc DEPS dsec_base)\n')
        self.write('lib/x/x.cc', '#include "base/a.h"\n#include <vector>\nint X() { return A(); }\n')

    def test_clean_tree_passes(self):
        self.base_tree()
        rc, out = self.run_check()
        self.assertEqual(rc, 0, out)
        self.assertIn('no violation', out)

    def test_include_not_in_the_rule_is_a_violation(self):
        self.base_tree()
        self.component('lib/y', 'base', '')
        self.write('lib/y/y.cc', '#include "lib/x/x.cc"\n')
        rc, out = self.run_check()
        self.assertEqual(rc, 1)
        self.assertIn('lib/y -> lib/x is not in lib/y/README.md', out)
        self.assertIn('lib/y/y.cc includes lib/x/x.cc', out)

    def test_cmake_link_not_in_the_rule_is_a_violation(self):
        self.base_tree()
        self.component('lib/z', 'nothing', 'dsec_cc_library(NAME dsec_z SRCS z.cc DEPS dsec_x)\n')
        self.write('lib/z/z.cc', 'int Z() { return 0; }\n')
        rc, out = self.run_check()
        self.assertEqual(rc, 1)
        self.assertIn('lib/z -> lib/x', out)
        self.assertIn('links dsec_x', out)

    def test_comments_in_cmake_do_not_count(self):
        self.base_tree()
        self.component('lib/z', 'nothing', '# once linked dsec_x\ndsec_cc_library(NAME dsec_z SRCS z.cc)\n')
        self.write('lib/z/z.cc', 'int Z() { return 0; }\n')
        rc, out = self.run_check()
        self.assertEqual(rc, 0, out)

    def test_components_depending_on_each_other_are_a_violation(self):
        self.component('p', 'q', '')
        self.component('q', 'p', '')
        self.write('p/p.h', '#include "q/q.h"\n')
        self.write('q/q.h', '#include "p/p.h"\n')
        rc, out = self.run_check()
        self.assertEqual(rc, 1)
        self.assertIn('components depend on each other', out)
        self.assertIn('top-level folders depend on each other', out)

    def test_top_level_cycle_through_subfolders_is_a_violation(self):
        self.component('top/a', 'low/b', '')
        self.component('low/b', 'nothing', '')
        self.component('low/c', 'top/d', '')
        self.component('top/d', 'nothing', '')
        self.write('top/a/a.h', '#include "low/b/b.h"\n')
        self.write('low/b/b.h', 'int B();\n')
        self.write('low/c/c.h', '#include "top/d/d.h"\n')
        self.write('top/d/d.h', 'int D();\n')
        rc, out = self.run_check()
        self.assertEqual(rc, 1)
        self.assertNotIn('components depend on each other', out)
        self.assertIn('top-level folders depend on each other', out)

    def test_folder_rule_allows_everything_below_it(self):
        self.base_tree()
        self.component('app', 'lib, base', '')
        self.write('app/main.cc', '#include "lib/x/x.cc"\n#include "base/a.h"\n')
        rc, out = self.run_check()
        self.assertEqual(rc, 0, out)

    def test_source_outside_any_component_is_a_violation(self):
        self.base_tree()
        self.write('stray/s.cc', 'int S() { return 0; }\n')
        rc, out = self.run_check()
        self.assertEqual(rc, 1)
        self.assertIn('stray/s.cc: in no component', out)

    def test_rule_naming_a_missing_folder_is_a_violation(self):
        self.base_tree()
        self.component('lib/w', 'base, lib/nonexistent', '')
        rc, out = self.run_check()
        self.assertEqual(rc, 1)
        self.assertIn("'lib/nonexistent', which is not a folder", out)

    def test_only_platform_kvm_includes_the_kvm_header(self):
        self.base_tree()
        self.write('lib/x/k.cc', '#include <linux/kvm.h>\n')
        rc, out = self.run_check()
        self.assertEqual(rc, 1)
        self.assertIn('lib/x/k.cc: includes <linux/kvm.h>', out)

    def test_stale_generated_doc_is_a_violation_and_write_doc_fixes_it(self):
        self.base_tree()
        self.write('docs/arch.md', '# Architecture\n\nProse.\n')
        rc, out = self.run_check('--check-doc', 'docs/arch.md')
        self.assertEqual(rc, 1)
        self.assertIn('stale', out)
        rc, out = self.run_check('--write-doc', 'docs/arch.md')
        self.assertEqual(rc, 0, out)
        with open(os.path.join(self.root, 'docs/arch.md'), encoding='utf-8') as f:
            doc = f.read()
        self.assertIn('Prose.', doc)
        self.assertIn('| 1 | `lib/x` | `base` |', doc)
        rc, out = self.run_check('--check-doc', 'docs/arch.md')
        self.assertEqual(rc, 0, out)


if __name__ == '__main__':
    unittest.main()
