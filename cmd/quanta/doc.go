// Command quanta is quanta's command-line tool.
//
// Usage:
//
//	quanta doctor   print the backend quanta runs on: name, description, PJRT plugin file and
//	                API version, devices, and whether the pure-Go fallback is in use; then run
//	                a small matmul graph on it
//
// Exit codes of doctor: 0 when XLA is in use (or the backend that GOMLX_BACKEND asked for);
// 3 when the pure-Go fallback is in use because no XLA plugin could start; 1 when the backend
// fails to start or to run the check graph. An unknown subcommand prints the usage and exits 2.
package main
