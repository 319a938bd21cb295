# transport/ links the worker planes' protos and gRPC, which the engine the unit tests link does not.
target_link_libraries(hidden_codec_test PRIVATE layerpipe_transport)
