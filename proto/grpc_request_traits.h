// How gRPC turns request bytes into messages in this project: as its own protobuf deserializer, except
// that a message it cannot parse because a string field is not UTF-8 (proto3 requires it) is answered
// INVALID_ARGUMENT naming the field ("GenerateRequest.prompt is not valid UTF-8") instead of an anonymous
// INTERNAL. Generated unary handlers deserialize through SerializationTraits<MessageLite>, streaming ones
// through their own request type, so both are specialized here.
//
// Every C++ file of a target that links layerpipe_api_proto is compiled with this header force-included
// (proto/CMakeLists.txt), so that every translation unit that can name a request sees the same
// specializations; it therefore declares only, and includes nothing but gRPC's tiny primary template. The definitions are in proto/utf8_request_traits.cc.
#ifndef LAYERPIPE_PROTO_GRPC_REQUEST_TRAITS_H_
#define LAYERPIPE_PROTO_GRPC_REQUEST_TRAITS_H_

#include <grpcpp/impl/serialization_traits.h>

namespace google::protobuf {
class MessageLite;
}  // namespace google::protobuf
namespace grpc {
class ByteBuffer;
class Status;
}  // namespace grpc
namespace layerpipe::v1 {
class GenerateRequest;
class StreamJobRequest;
}  // namespace layerpipe::v1

#define LAYERPIPE_UTF8_CHECKED_REQUEST(T)                                                                 \
  template <>                                                                                            \
  class grpc::SerializationTraits<T, void> {                                                             \
   public:                                                                                               \
    static grpc::Status Serialize(const google::protobuf::MessageLite& msg, grpc::ByteBuffer* bb, bool* own); \
    static grpc::Status Deserialize(grpc::ByteBuffer* buffer, google::protobuf::MessageLite* msg);        \
  };

LAYERPIPE_UTF8_CHECKED_REQUEST(google::protobuf::MessageLite)
LAYERPIPE_UTF8_CHECKED_REQUEST(layerpipe::v1::GenerateRequest)
LAYERPIPE_UTF8_CHECKED_REQUEST(layerpipe::v1::StreamJobRequest)

#undef LAYERPIPE_UTF8_CHECKED_REQUEST

#endif  // LAYERPIPE_PROTO_GRPC_REQUEST_TRAITS_H_
