# The oracle check's own GGUF reader, dequantizers and GGUF -> Hugging Face mapping
# (tools/oracle/gguf_dequant.py, gguf_to_hf.py) against `latte dequant`: bit-identical values for
# every --type, and the f32 / bf16 conversions mapped back equal the checkpoints they came from.
latte_cli_test(NAME dequant_help ARGS dequant --help EXPECT_STDOUT "usage: latte dequant FILE.gguf -o OUT.safetensors")
latte_cli_test(NAME dequant_no_output ARGS dequant ${PROJECT_SOURCE_DIR}/tests/data/ggml-vocab-deepseek-llm.gguf
               EXPECT_EXIT 1 EXPECT_STDERR "no output file")
latte_cli_test(NAME dequant_unknown_tensor
               ARGS dequant ${PROJECT_SOURCE_DIR}/tests/data/ggml-vocab-deepseek-llm.gguf -o ${CMAKE_CURRENT_BINARY_DIR}/x.st
                    --tensor blk.0.nothing EXPECT_EXIT 1 EXPECT_STDERR "no tensor 'blk.0.nothing'")

find_package(Python3 COMPONENTS Interpreter)
if(Python3_FOUND)
  set(_validate ${PROJECT_SOURCE_DIR}/tools/oracle/validate_dequant.py)
  set(_oracle ${PROJECT_SOURCE_DIR}/tests/data/oracle)
  add_test(NAME oracle_dequant_every_type
           COMMAND ${Python3_EXECUTABLE} ${_validate} --latte $<TARGET_FILE:latte-cli> --fixture ${_oracle}/deepseek-v2-lite
                   --work ${CMAKE_CURRENT_BINARY_DIR}/oracle-dequant-types)
  add_test(NAME oracle_dequant_mapping
           COMMAND ${Python3_EXECUTABLE} ${_validate} --latte $<TARGET_FILE:latte-cli> --fixture ${_oracle}/deepseek-v3
                   --fixture ${_oracle}/glm-4.7-flash --fixture ${_oracle}/glm-5-sparse --types f32,q4_k_m
                   --work ${CMAKE_CURRENT_BINARY_DIR}/oracle-dequant-mapping)
  set_tests_properties(oracle_dequant_every_type oracle_dequant_mapping PROPERTIES LABELS cli)
endif()
