// Naming threads so operators can tell them apart. Any thread may call it, for itself.
#pragma once

#include <pthread.h>

namespace llmtap {

// Names the calling thread as `top -H`, `ps -L` and /proc/<pid>/task/*/comm show it, so an
// operator (and bench/ scripts) can tell the proxy's event loops from capture's background work.
// Linux keeps at most 15 characters; longer names are cut.
inline void NameThisThread(const char* name) {
  char cut[16] = {};
  for (int i = 0; i < 15 && name[i] != '\0'; ++i) cut[i] = name[i];
  pthread_setname_np(pthread_self(), cut);
}

}  // namespace llmtap
