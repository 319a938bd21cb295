# Float64 oracle (tests/oracle/oracle.py): its own invariants, and the engine held to it.
add_test(NAME oracle_self_test
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/oracle/self_test.py)
set_tests_properties(oracle_self_test PROPERTIES TIMEOUT 120)

# Text prompts only (check_engine.py's default group).
add_test(NAME oracle_exactness
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/oracle/check_engine.py
                 --bin ${CMAKE_BINARY_DIR}/bin --work ${CMAKE_BINARY_DIR}/test_data/oracle)
set_tests_properties(oracle_exactness PROPERTIES TIMEOUT 300)

# Images and audio (MULTIMODAL.md): `layerpipe score/generate --image/--audio` on vocab-262144
# checkpoints whose sliding window is shorter than an image block. The float64 head over 262,144
# ids is most of the time (about 3 minutes on 2 busy cores, the engine's runs not counted).
add_test(NAME oracle_multimodal
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/oracle/check_engine.py --cases multimodal
                 --bin ${CMAKE_BINARY_DIR}/bin --work ${CMAKE_BINARY_DIR}/test_data/oracle_multimodal)
set_tests_properties(oracle_multimodal PROPERTIES TIMEOUT 900)

# The text cases again on each CPU matmul kernel this machine can run but does not pick by itself
# (LAYERPIPE_MATMUL_ISA), with the attention paths that follow it: an AVX-512 machine then holds the
# AVX2 and AVX-512F paths of the whole engine to the oracle too, as AVX2-only machines run them, and
# an Intel one (or a KVM guest hiding the BF16 its host has: LAYERPIPE_ASSUME_AVX512_BF16) the
# vdpbf16ps path AMD machines run by default. Skipped (77) where the CPU lacks the kernel.
foreach(isa avx2 avx512f avx512bf16)
  add_test(NAME oracle_exactness_${isa}
           COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/oracle/check_engine.py --expect-kernel ${isa}
                   --bin ${CMAKE_BINARY_DIR}/bin --work ${CMAKE_BINARY_DIR}/test_data/oracle_${isa})
  set_tests_properties(oracle_exactness_${isa} PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                       ENVIRONMENT "LAYERPIPE_MATMUL_ISA=${isa};LAYERPIPE_ASSUME_AVX512_BF16=1")
endforeach()

# Quantization at load: the text cases with `--quantize int8` and `int4`, against the oracle on the
# weights dequantized by the same rule (check_engine.py: dequantized_int8, dequantized_int4).
foreach(format int8 int4)
  add_test(NAME oracle_exactness_${format}
           COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/oracle/check_engine.py --quantize ${format}
                   --bin ${CMAKE_BINARY_DIR}/bin --work ${CMAKE_BINARY_DIR}/test_data/oracle_${format})
  set_tests_properties(oracle_exactness_${format} PROPERTIES TIMEOUT 300)
endforeach()

# The embedding / tied head quantized too (`--quantize-head int8`), over the w4a16 layout's int4 layers:
# the oracle dequantizes embed_tokens by the int8 rule.
add_test(NAME oracle_exactness_int8_head
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/oracle/check_engine.py --checkpoint w4a16
                 --quantize-head int8
                 --bin ${CMAKE_BINARY_DIR}/bin --work ${CMAKE_BINARY_DIR}/test_data/oracle_int8_head)
set_tests_properties(oracle_exactness_int8_head PROPERTIES TIMEOUT 300)

# Google's QAT layout as shipped: the text cases written by `make-checkpoint --quantization w4a16`
# (compressed-tensors int4), against the oracle on the weights the packed tensors hold (packed_np.py).
add_test(NAME oracle_exactness_w4a16
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/oracle/check_engine.py --checkpoint w4a16
                 --bin ${CMAKE_BINARY_DIR}/bin --work ${CMAKE_BINARY_DIR}/test_data/oracle_w4a16)
set_tests_properties(oracle_exactness_w4a16 PROPERTIES TIMEOUT 300)
