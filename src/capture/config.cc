#include "capture/config.h"
