# The pocketllm-cuda wheel (python/cuda/pyproject.toml): scikit-build-core
# configures the project root with -DCMAKE_PROJECT_pocketllm_INCLUDE=<this
# file> and -DPL_CUDA=ON. Its one file is the CUDA backend's module (CUDA
# runtime linked in statically, see cmake/cuda.cmake), inside the
# pocketllm_cuda package; pocketllm points PL_CUDA_MODULE at it
# (pocketllm/native.py). The generator expression resolves at generate time,
# after cmake/cuda.cmake has defined the target.
install(FILES "$<TARGET_FILE:pocketllm_cuda>" DESTINATION pocketllm_cuda)
