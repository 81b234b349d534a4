// SPDX-License-Identifier: Apache-2.0
#include "sandbox/fncall/fncall_testing.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "sandbox/container/test_image.h"

namespace dsec::fncall::testing {

absl::StatusOr<TestLayers> EnsureTestLayers() {
  const std::string dir = DSEC_FNCALL_TEST_LAYER_DIR;
  TestLayers layers{absl::StrCat(dir, "/runtime.erofs"), absl::StrCat(dir, "/crash.erofs")};
  if (::access(absl::StrCat(dir, "/.complete").c_str(), F_OK) == 0) return layers;
  auto out = container::testing::RunHostCommand(
      {"/bin/bash", absl::StrCat(DSEC_FNCALL_TESTDATA_DIR, "/build_test_layers.sh"), dir});
  if (!out.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "building fncall test layers failed (needs python3.11, bash, busybox-static, "
        "erofs-utils): ",
        out.status().ToString()));
  }
  return layers;
}

}  // namespace dsec::fncall::testing
