// Run a model exported by tensortune (`tuned.export("model.so")`, `tensortune compile -o model.so`)
// with TVM's C++ runtime alone: no Python, no tensortune, no compiler.
//
//   deploy MODEL.so INPUT.bin D0,D1,... OUTPUT.bin
//
// INPUT.bin holds the float32 input in C order; the first output is written to OUTPUT.bin the same way.
// TVM_NUM_THREADS sets the thread count; the threads are placed as tensortune places them (PlaceThreads).
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>

#include <pthread.h>
#include <sched.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace ffi = tvm::ffi;

// host memory for the input tensor (the runtime allocates the outputs itself)
struct CPUAlloc {
  void AllocData(DLTensor* t) { t->data = std::aligned_alloc(64, (ffi::GetDataSize(*t) + 63) / 64 * 64); }
  void FreeData(DLTensor* t) { std::free(t->data); }
};

// The environment variable TVM reads when it configures a thread pool: 0 = bind nothing.
const char* const kBind = "TVM_BIND_THREADS";

// Place TVM's threads as tensortune does (tensortune/utils/placement.py): each worker of the pool
// on a core of its own and this thread, which runs the first share of every parallel loop, alone
// on the first core, all inside the affinity mask the process was given. Left to TVM, this thread
// is free on every core and can sit on a worker's core for seconds: the model then runs at half
// speed. Returns the placement in words.
std::string PlaceThreads() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0) return "not pinned (no affinity mask)";
  std::vector<int> cores;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &mask)) cores.push_back(c);
  // starts the pool; TVM_BIND_THREADS=0 (set at the start of main) keeps it from binding by itself
  const int threads = static_cast<int>(ffi::Function::GetGlobal("runtime.NumThreads").value()().cast<int64_t>());
  if (threads <= 1) return "1 thread";
  const bool pin = cores.size() >= static_cast<size_t>(threads);
  ffi::Array<ffi::String> given;
  for (size_t i = 0; i < (pin ? static_cast<size_t>(threads) : cores.size()); ++i) given.push_back(std::to_string(cores[i]));
  const int one_core_per_thread = -2, share_all_cores = -3;
  const char* before = std::getenv(kBind);
  const std::string saved = before ? before : "";
  setenv(kBind, "1", 1);
  ffi::Function::GetGlobal("runtime.config_threadpool").value()(pin ? one_core_per_thread : share_all_cores, threads, given);
  if (before) setenv(kBind, saved.c_str(), 1); else unsetenv(kBind);
  if (!pin) {
    sched_setaffinity(0, sizeof(mask), &mask);  // configuring the pool set this thread's mask
    std::cerr << "warning: " << threads << " threads but " << cores.size()
              << " usable cores: they share them (slower than one thread per core)\n";
    return std::to_string(threads) + " threads, not pinned";
  }
  cpu_set_t first;
  CPU_ZERO(&first);
  CPU_SET(cores[0], &first);
  pthread_setaffinity_np(pthread_self(), sizeof(first), &first);
  std::string where;
  for (const auto& c : given) where += (where.empty() ? "" : ",") + std::string(c);
  return std::to_string(threads) + " threads on cores " + where + " (this thread on " + std::to_string(cores[0]) + ")";
}

int main(int argc, char** argv) {
  setenv(kBind, "0", 0);  // before any pool starts (a value the user set is kept)
  if (argc != 5) {
    std::cerr << "usage: deploy MODEL.so INPUT.bin D0,D1,... OUTPUT.bin\n";
    return 2;
  }
  std::vector<int64_t> shape;
  std::stringstream dims(argv[3]);
  for (std::string d; std::getline(dims, d, ',');) shape.push_back(std::stoll(d));

  // the Relax VM in the library: load its executable, initialise it on the CPU (pooled allocator)
  // an absolute path: dlopen looks a bare file name up on the library path, not in this folder
  ffi::Module lib = ffi::Module::LoadFromFile(std::filesystem::absolute(argv[1]).string());
  ffi::Module vm = lib->GetFunction("vm_load_executable").value()().cast<ffi::Module>();
  const int cpu = static_cast<int>(kDLCPU), pooled = 2;
  vm->GetFunction("vm_initialization").value()(cpu, 0, pooled);
  std::cout << "threads: " << PlaceThreads() << "\n";

  DLDevice dev{kDLCPU, 0};
  ffi::Tensor input = ffi::Tensor::FromNDAlloc(CPUAlloc(), ffi::Shape(shape), DLDataType{kDLFloat, 32, 1}, dev);
  size_t count = 1;
  for (int64_t d : shape) count *= static_cast<size_t>(d);
  std::ifstream in(argv[2], std::ios::binary);
  in.read(static_cast<char*>(input.data_ptr()), static_cast<std::streamsize>(count * sizeof(float)));
  if (!in) {
    std::cerr << argv[2] << ": fewer than " << count << " float32 values\n";
    return 2;
  }

  ffi::Any result = vm->GetFunction("main").value()(input);
  // a Relax function returns a tuple of outputs: take the first
  ffi::Array<ffi::Any> outputs = result.cast<ffi::Array<ffi::Any>>();
  ffi::Tensor out = outputs[0].cast<ffi::Tensor>();
  size_t n = 1;
  std::cout << "output shape";
  for (int i = 0; i < out.ndim(); ++i) {
    n *= static_cast<size_t>(out.shape()[i]);
    std::cout << (i ? "x" : " ") << out.shape()[i];
  }
  std::cout << "\n";
  std::ofstream(argv[4], std::ios::binary).write(static_cast<const char*>(out.data_ptr()),
                                                  static_cast<std::streamsize>(n * sizeof(float)));
  return 0;
}
