#include "proto/grpc_request_traits.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/message.h>
#include <google/protobuf/stubs/common.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/status.h>

#include "proto/layerpipe.pb.h"

namespace layerpipe {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;

// The path of the first string field under `type` in the encoded message `in` that is not UTF-8; empty
// when there is none (or the bytes are malformed in another way).
std::string FindBadUtf8(CodedInputStream* in, const Descriptor* type) {
  while (uint32_t tag = in->ReadTag()) {
    const FieldDescriptor* field = type->FindFieldByNumber(static_cast<int>(WireFormatLite::GetTagFieldNumber(tag)));
    if (WireFormatLite::GetTagWireType(tag) != WireFormatLite::WIRETYPE_LENGTH_DELIMITED || field == nullptr ||
        (field->type() != FieldDescriptor::TYPE_STRING && field->type() != FieldDescriptor::TYPE_MESSAGE)) {
      if (!WireFormatLite::SkipField(in, tag)) return {};
      continue;
    }
    uint32_t length = 0;
    if (!in->ReadVarint32(&length)) return {};
    if (field->type() == FieldDescriptor::TYPE_STRING) {
      std::string bytes;
      if (!in->ReadString(&bytes, static_cast<int>(length))) return {};
      if (!google::protobuf::internal::IsStructurallyValidUTF8(bytes.data(), static_cast<int>(bytes.size()))) {
        return type->name() + "." + field->name();
      }
      continue;
    }
    const CodedInputStream::Limit limit = in->PushLimit(static_cast<int>(length));
    const std::string inner = FindBadUtf8(in, field->message_type());
    if (!inner.empty()) return type->name() + "." + field->name() + inner.substr(inner.find('.'));
    in->PopLimit(limit);
  }
  return {};
}


// Parses `buffer` into `msg`; on failure names the first string field whose bytes are not UTF-8.
grpc::Status DeserializeCheckingUtf8(grpc::ByteBuffer* buffer, google::protobuf::MessageLite* lite) {
  auto* msg = dynamic_cast<google::protobuf::Message*>(lite);
  if (msg == nullptr) return grpc::GenericDeserialize<grpc::ProtoBufferReader, google::protobuf::MessageLite>(buffer, lite);
  grpc::Slice slice;
  if (buffer == nullptr || !buffer->DumpToSingleSlice(&slice).ok()) {
    return grpc::Status(grpc::StatusCode::INTERNAL, "no request payload");
  }
  buffer->Clear();
  const auto* data = reinterpret_cast<const uint8_t*>(slice.begin());
  const int size = static_cast<int>(slice.size());
  if (msg->ParseFromArray(data, size)) return grpc::Status::OK;
  CodedInputStream in(data, size);
  const std::string field = FindBadUtf8(&in, msg->GetDescriptor());
  if (!field.empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, field + " is not valid UTF-8");
  }
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the request is not a valid " + msg->GetTypeName());
}

}  // namespace
}  // namespace layerpipe

#define LAYERPIPE_UTF8_CHECKED_REQUEST(T)                                                                   \
  grpc::Status grpc::SerializationTraits<T, void>::Serialize(const google::protobuf::MessageLite& msg,      \
                                                            grpc::ByteBuffer* bb, bool* own) {              \
    return grpc::GenericSerialize<grpc::ProtoBufferWriter, T>(msg, bb, own);                                 \
  }                                                                                                         \
  grpc::Status grpc::SerializationTraits<T, void>::Deserialize(grpc::ByteBuffer* buffer,                    \
                                                              google::protobuf::MessageLite* msg) {         \
    return layerpipe::DeserializeCheckingUtf8(buffer, msg);                                                 \
  }

LAYERPIPE_UTF8_CHECKED_REQUEST(google::protobuf::MessageLite)
LAYERPIPE_UTF8_CHECKED_REQUEST(layerpipe::v1::GenerateRequest)
LAYERPIPE_UTF8_CHECKED_REQUEST(layerpipe::v1::StreamJobRequest)
