# Wheel build only: scikit-build-core configures the project root with
# -DCMAKE_PROJECT_pocketllm_INCLUDE=<this file>, so CMake runs it right after
# the root's project() call. It adds the install rules the wheel needs: the
# shared library (as a plain file, libpocketllm.so) and the command-line tool,
# both inside the Python package. Generator expressions resolve at generate
# time, when the targets defined later in the root CMakeLists.txt exist.
install(FILES "$<TARGET_FILE:pocketllm>" DESTINATION pocketllm RENAME libpocketllm.so)
install(PROGRAMS "$<TARGET_FILE:pocketllm_cli>" DESTINATION pocketllm/bin)
