#include "tokfeed/client.hpp"

#include <cstring>

#include "attachment.hpp"

namespace tokfeed {

std::string_view Status::code_name() const noexcept {
  switch (code_) {
    case Code::kOk: return "ok";
    case Code::kEndOfStream: return "end of stream";
    case Code::kDaemonLost: return "daemon lost";
    case Code::kCorrupt: return "corrupt shared memory";
    case Code::kRefused: return "refused";
    case Code::kIoError: return "i/o error";
    case Code::kInvalidArgument: return "invalid argument";
  }
  return "unknown";
}

Batch::Batch(Batch&& o) noexcept { *this = std::move(o); }

Batch& Batch::operator=(Batch&& o) noexcept {
  if (this != &o) {
    release();
    attachment_ = std::move(o.attachment_);
    ring_ = o.ring_;
    seq_ = o.seq_;
    epoch_ = o.epoch_, step_ = o.step_, index_ = o.index_;
    rows_ = o.rows_, seq_len_ = o.seq_len_;
    real_tokens_ = o.real_tokens_, checksum_ = o.checksum_;
    tensor_count_ = o.tensor_count_;
    std::memcpy(static_cast<void*>(tensors_), o.tensors_, sizeof tensors_);
    o.attachment_.reset();
  }
  return *this;
}

Batch::~Batch() { release(); }

void Batch::release() noexcept {
  if (!attachment_) return;
  attachment_->release(ring_, seq_);
  attachment_.reset();
}

const TensorView* Batch::find(std::string_view name) const noexcept {
  for (std::size_t i = 0; i < tensor_count_; ++i)
    if (tensors_[i].name == name) return &tensors_[i];
  return nullptr;
}

Status Client::connect(const ClientOptions& opt, std::unique_ptr<Client>& out) noexcept {
  try {
    auto a = std::make_shared<detail::Attachment>();
    Status st = a->open(opt);
    if (!st.ok()) return st;
    out.reset(new Client(std::move(a)));
    return {};
  } catch (const std::exception& e) {  // allocation failure: nothing else throws
    return {Code::kIoError, e.what()};
  }
}

Client::~Client() = default;

Status Client::next(Batch& out) noexcept { return a_->next(out); }

Position Client::position() const noexcept { return a_->position_of(a_->next_index()); }
Position Client::position_of(uint64_t index) const noexcept { return a_->position_of(index); }

uint64_t Client::batches_per_epoch() const noexcept {
  // Known counts first: they place the position at an epoch's end.
  if (!a_->wait_counts()) return 0;
  return a_->batches_in(position().epoch);
}
uint64_t Client::epochs() const noexcept { return a_->epochs(); }
Split Client::split() const noexcept { return a_->split(); }
uint32_t Client::rank() const noexcept { return a_->rank(); }
uint32_t Client::workers() const noexcept { return a_->workers(); }
const void* Client::mapping_base() const noexcept { return a_->view_base(); }
std::size_t Client::mapping_size() const noexcept { return a_->data().size(); }

}  // namespace tokfeed
