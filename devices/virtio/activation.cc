// SPDX-License-Identifier: Apache-2.0
#include "devices/virtio/activation.h"

#include <utility>


namespace dsec::virtio {

void Activation::Begin(const ActivateContext& context) {
  if (active_) End();
  context_ = context;
  active_ = true;
  broken_ = false;
  broken_reason_ = absl::OkStatus();
  ++epoch_;
  token_ = std::make_shared<const uint64_t>(epoch_);
}

void Activation::End() {
  token_.reset();
  context_ = {};
  active_ = false;
  broken_ = false;
  broken_reason_ = absl::OkStatus();
  ++epoch_;
}

void Activation::MarkBroken(const absl::Status& reason) {
  if (!active_ || broken_) return;
  broken_ = true;
  broken_reason_ = reason.ok() ? absl::InternalError("device marked broken without a reason")
                               : reason;
  if (on_broken_) on_broken_(broken_reason_);
  // The hook may not end the activation (documented); the notifier is
  // still the one Activate() was given.
  if (context_.notifier != nullptr) context_.notifier->ReportBroken(broken_reason_);
}

std::function<void()> Activation::Guard(std::function<void()> task) const {
  std::weak_ptr<const uint64_t> token = token_;
  return [token = std::move(token), task = std::move(task)] {
    // Loop thread: End() and destruction happen here too, so the token
    // cannot expire between this check and the task.
    if (token.expired()) return;
    task();
  };
}

}  // namespace dsec::virtio
