// lockstep_h5_reader: the program Lockstep reads HDF5 files in (h5_isolated.cpp says why).
// The library starts it; it is not meant to be run by hand.
#include "io/h5_util.h"

int main(int argc, char** argv) { return lockstep::io::h5::reader_main(argc, argv); }
