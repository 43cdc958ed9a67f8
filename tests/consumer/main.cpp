// The C consumer compiled as C++: the headers' extern "C" and the static archive from C++.
#include "main.c"
