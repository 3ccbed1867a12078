# Thin wrapper over CMake: `make` builds everything, `make test` builds and runs
# the test suite, `make asan` runs the suite under ASan+UBSan, `make fuzz`
# builds the libFuzzer targets with clang.
BUILD ?= build
JOBS  ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all test asan fuzz run clean

all:
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

test: all
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

asan:
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DPL_SANITIZE=ON $(CMAKE_FLAGS) >/dev/null
	@cmake --build build-asan -j $(JOBS)
	@cd build-asan && ctest --output-on-failure -j $(JOBS)

fuzz:
	@CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DPL_FUZZ=ON $(CMAKE_FLAGS) >/dev/null
	@cmake --build build-fuzz -j $(JOBS)

DEMO_MODEL ?= tests/fixtures/models/tiny-qwen3-q4_k_m.gguf
run: all
	@$(BUILD)/bin/pocketllm run --model $(DEMO_MODEL) --prompt "The capital of France is" --max-tokens 24

clean:
	rm -rf build build-asan build-fuzz
