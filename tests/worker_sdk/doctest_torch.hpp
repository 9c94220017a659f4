// doctest in a LibTorch translation unit: LibTorch pulls in glog, whose CHECK* macros collide with
// doctest's. LibTorch's headers come first, glog's macros go, then doctest defines its own.
#pragma once

#include <c10/util/Logging.h>

#undef CHECK
#undef CHECK_EQ
#undef CHECK_NE
#undef CHECK_LE
#undef CHECK_LT
#undef CHECK_GE
#undef CHECK_GT

#include <doctest/doctest.h>
