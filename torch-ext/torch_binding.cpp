// Makes the native module importable (REGISTER_EXTENSION). Its ops are registered on
// torch's stable ABI in torch-ext/stable/binding.cpp, for either backend.
#include "registration.h"

REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
