// The `fresnel` command-line tool; see docs/cli.md.
#include <iostream>

#include "commands.h"

int main(int argc, char** argv) { return fresnel::cli::Main(argc, argv, std::cout, std::cerr); }
