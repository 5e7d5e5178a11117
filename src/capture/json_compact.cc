#include "capture/json_compact.h"
