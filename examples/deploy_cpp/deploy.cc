// Run a model exported by tensortune (`tuned.export("model.so")`, `tensortune compile -o model.so`)
// with TVM's C++ runtime alone: no Python, no tensortune, no compiler.
//
//   deploy MODEL.so INPUT.bin D0,D1,... OUTPUT.bin
//
// INPUT.bin holds the float32 input in C order; the first output is written to OUTPUT.bin the same way.
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>

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

int main(int argc, char** argv) {
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
