package main

import (
	"fmt"
	"io"
	"os"

	"github.com/quanta-ml/quanta/internal/cmdflags"
	"github.com/quanta-ml/quanta/kernels"
	"github.com/quanta-ml/quanta/runtime"
)

// Exit codes.
const (
	exitOK       = 0
	exitFailure  = cmdflags.ExitFailure
	exitUsage    = cmdflags.ExitUsage
	exitFallback = 3
)

const usage = `usage: quanta <command>

commands:
  doctor                     report the backend quanta runs on (exit 0: XLA; 3: pure-Go fallback; 1: failure)
  run [flags] MODEL "prompt" run a GGUF model (llama, gemma3, qwen2) on a prompt (quanta run -h lists the flags)
  help [command]             print this usage, or the command's help
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes the command line args and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "run" {
		return cmdRun(args[1:], stdout, stderr)
	}
	if len(args) == 2 && args[0] == "help" { // as go help CMD: CMD's help, exit 0
		switch args[1] {
		case "run":
			return cmdRun([]string{"-h"}, stdout, stderr)
		case "doctor", "help":
			return writeHelp(usage, stdout, stderr)
		}
		fmt.Fprintf(stderr, "quanta help: unknown command %q\n%s", args[1], usage)
		return exitUsage
	}
	if len(args) == 2 && args[0] == "doctor" && isHelp(args[1]) { // as quanta run -h: the usage, exit 0
		return writeHelp(usage, stdout, stderr)
	}
	if len(args) != 1 {
		what := "no command"
		if len(args) > 1 {
			what = fmt.Sprintf("%q takes no arguments; got %q", args[0], args[1:])
			if args[0] == "help" {
				what = fmt.Sprintf("%q takes no arguments or one command; got %q", args[0], args[1:])
			}
		}
		fmt.Fprintf(stderr, "quanta: %s\n%s", what, usage)
		return exitUsage
	}
	switch args[0] {
	case "doctor":
		return doctor(stdout, stderr)
	case "help":
		return writeHelp(usage, stdout, stderr)
	default:
		if isHelp(args[0]) {
			return writeHelp(usage, stdout, stderr)
		}
		fmt.Fprintf(stderr, "quanta: unknown command %q\n%s", args[0], usage)
		return exitUsage
	}
}

// writeHelp writes the help asked for to stdout: exit 0, or 1 when it cannot be written (a full
// disk, a closed pipe), the error named on stderr.
func writeHelp(help string, stdout, stderr io.Writer) int {
	if _, err := io.WriteString(stdout, help); err != nil {
		fmt.Fprintf(stderr, "quanta: writing the help: %v\n", err)
		return exitFailure
	}
	return exitOK
}

// isHelp reports whether arg asks for help, as the flag package reads -h.
func isHelp(arg string) bool { return arg == "-h" || arg == "-help" || arg == "--help" }

// probe is kernels.Probe; a test replaces it to see a probe that fails.
var probe = kernels.Probe

// doctor prints the runtime report and checks that the backend runs a graph. A report that
// cannot be written is a failure: a script reading it would miss what it says.
func doctor(stdout, stderr io.Writer) (code int) {
	out := &errWriter{w: stdout}
	stdout = out
	defer func() {
		if out.err != nil {
			fmt.Fprintf(stderr, "quanta doctor: writing the report: %v\n", out.err)
			code = exitFailure
		}
	}()
	info, err := runtime.Report()
	if err != nil {
		fmt.Fprintf(stderr, "quanta doctor: %v\n", err)
		return exitFailure
	}
	fmt.Fprint(stdout, info)
	if err := runtime.Check(runtime.MustBackend()); err != nil {
		fmt.Fprintf(stdout, "%-13s failed\n", "check:")
		fmt.Fprintf(stderr, "quanta doctor: %v\n", err)
		return exitFailure
	}
	fmt.Fprintf(stdout, "%-13s ok (a [2,3]x[3,2] matmul ran on device 0)\n", "check:")
	report := runtime.MustKernels()
	fmt.Fprint(stdout, report)
	if report.Err() == nil {
		// The products built on the backend call the kernels: a probe that fails is a failure.
		if err := probe(runtime.MustBackend()); err != nil {
			fmt.Fprintf(stdout, "%-13s failed\n", "kernel probe:")
			fmt.Fprintf(stderr, "quanta doctor: %v\n", err)
			return exitFailure
		}
		fmt.Fprintf(stdout, "%-13s ok (a custom call ran)\n", "kernel probe:")
	}
	if info.Fallback {
		return exitFallback
	}
	return exitOK
}

// errWriter writes to w until a write fails, then keeps the error and writes nothing more.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}
