// Command pulumi-language-python is a small Python language host for the
// Pulumi engine, built here because the upstream host lives in a nested Go
// module that the module proxy does not serve.
//
// It implements what `pulumi up/preview/destroy` of a Python program needs:
// Handshake, Run (spawn pulumi-language-python-exec under the project's
// virtualenv, the stack's config on a pipe rather than in one size-capped
// environment variable), RunPlugin (a Python policy pack: `pulumi preview --policy-pack`
// starts packs through the language host whenever one is installed, not through
// the pulumi-analyzer-policy-python shim), GetPluginInfo, About, and empty
// dependency/plugin answers (plugins are resolved on demand by the engine).
// Everything else answers Unimplemented, which the engine treats as "not supported".
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	pbempty "google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/grpc"

	"github.com/pulumi/pulumi/sdk/v3/go/common/util/rpcutil"
	"github.com/pulumi/pulumi/sdk/v3/go/common/version"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
)

func main() {
	// The engine passes its own flags (-v, --logtostderr, --tracing ...) and the
	// engine address as the last positional argument. Only the address matters.
	engineAddress := ""
	for _, a := range os.Args[1:] {
		if !strings.HasPrefix(a, "-") {
			engineAddress = a
		}
	}
	execPath, err := findExec()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	host := &pythonHost{exec: execPath, engineAddress: engineAddress}
	handle, err := rpcutil.ServeWithOptions(rpcutil.ServeOptions{
		Init: func(srv *grpc.Server) error {
			pulumirpc.RegisterLanguageRuntimeServer(srv, host)
			return nil
		},
		Options: rpcutil.OpenTracingServerInterceptorOptions(nil),
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "could not start language host: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("%d\n", handle.Port)
	if err := <-handle.Done; err != nil {
		fmt.Fprintf(os.Stderr, "language host stopped: %v\n", err)
		os.Exit(1)
	}
}

// findExec locates pulumi-language-python-exec next to this binary.
func findExec() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	candidate := filepath.Join(filepath.Dir(self), "pulumi-language-python-exec")
	if _, err := os.Stat(candidate); err == nil {
		return candidate, nil
	}
	if p, err := exec.LookPath("pulumi-language-python-exec"); err == nil {
		return p, nil
	}
	return "", errors.New("pulumi-language-python-exec not found next to the language host or on PATH")
}

type pythonHost struct {
	pulumirpc.UnimplementedLanguageRuntimeServer
	exec          string
	engineAddress string
}

func (h *pythonHost) Handshake(
	_ context.Context, req *pulumirpc.LanguageHandshakeRequest,
) (*pulumirpc.LanguageHandshakeResponse, error) {
	if req.GetEngineAddress() != "" {
		h.engineAddress = req.GetEngineAddress()
	}
	return &pulumirpc.LanguageHandshakeResponse{}, nil
}

func (h *pythonHost) GetRequiredPlugins(
	context.Context, *pulumirpc.GetRequiredPluginsRequest,
) (*pulumirpc.GetRequiredPluginsResponse, error) {
	return &pulumirpc.GetRequiredPluginsResponse{}, nil
}

func (h *pythonHost) GetRequiredPackages(
	context.Context, *pulumirpc.GetRequiredPackagesRequest,
) (*pulumirpc.GetRequiredPackagesResponse, error) {
	return &pulumirpc.GetRequiredPackagesResponse{}, nil
}

func (h *pythonHost) GetProgramDependencies(
	context.Context, *pulumirpc.GetProgramDependenciesRequest,
) (*pulumirpc.GetProgramDependenciesResponse, error) {
	return &pulumirpc.GetProgramDependenciesResponse{}, nil
}

func (h *pythonHost) GetPluginInfo(context.Context, *pbempty.Empty) (*pulumirpc.PluginInfo, error) {
	return &pulumirpc.PluginInfo{Version: version.Version}, nil
}

func (h *pythonHost) About(_ context.Context, req *pulumirpc.AboutRequest) (*pulumirpc.AboutResponse, error) {
	python := pythonFor(req.GetInfo())
	out, err := exec.Command(python, "--version").Output()
	if err != nil {
		return nil, fmt.Errorf("running %s --version: %w", python, err)
	}
	return &pulumirpc.AboutResponse{
		Executable: python,
		Version:    strings.TrimPrefix(strings.TrimSpace(string(out)), "Python "),
	}, nil
}

func (h *pythonHost) Cancel(context.Context, *pbempty.Empty) (*pbempty.Empty, error) {
	return &pbempty.Empty{}, nil
}

// virtualenvFor returns the absolute virtualenv directory named by the
// project's `runtime.options.virtualenv`, or "" when none is set.
func virtualenvFor(info *pulumirpc.ProgramInfo) string {
	if info == nil || info.GetOptions() == nil {
		return ""
	}
	v, ok := info.GetOptions().AsMap()["virtualenv"].(string)
	if !ok || v == "" {
		return ""
	}
	if !filepath.IsAbs(v) {
		v = filepath.Join(info.GetRootDirectory(), v)
	}
	return filepath.Clean(v)
}

func pythonFor(info *pulumirpc.ProgramInfo) string {
	if venv := virtualenvFor(info); venv != "" {
		return filepath.Join(venv, "bin", "python")
	}
	if p := os.Getenv("PULUMI_PYTHON_CMD"); p != "" {
		return p
	}
	return "python3"
}

// RunPlugin runs a plugin directory's __main__.py under its virtualenv, as the
// upstream host does for a bare directory: a policy pack's PolicyPack(...) serves
// the analyzer and prints its port on stdout, which the engine reads from the stream.
func (h *pythonHost) RunPlugin(
	req *pulumirpc.RunPluginRequest, server pulumirpc.LanguageRuntime_RunPluginServer,
) error {
	info := req.GetInfo()
	if info == nil || info.GetProgramDirectory() == "" {
		return errors.New("RunPlugin: no plugin directory in the request")
	}
	python := pythonFor(info)
	if venv := virtualenvFor(info); venv != "" {
		if _, err := os.Stat(python); err != nil {
			return fmt.Errorf("the virtualenv %q named in %s does not exist; run scripts/bootstrap.sh",
				venv, filepath.Join(info.GetProgramDirectory(), "PulumiPolicy.yaml"))
		}
	}
	if _, err := os.Stat(filepath.Join(info.GetProgramDirectory(), "__main__.py")); err != nil {
		return fmt.Errorf("plugin %s has no __main__.py to run", info.GetProgramDirectory())
	}

	closer, stdout, stderr, err := rpcutil.MakeRunPluginStreams(server, false)
	if err != nil {
		return err
	}
	defer closer.Close()

	args := append([]string{"-u", info.GetProgramDirectory()}, req.GetArgs()...)
	cmd := exec.CommandContext(server.Context(), python, args...)
	cmd.Dir = req.GetPwd()
	cmd.Env = append(os.Environ(), req.GetEnv()...)
	if venv := virtualenvFor(info); venv != "" {
		cmd.Env = append(cmd.Env, "VIRTUAL_ENV="+venv, "PATH="+filepath.Join(venv, "bin")+":"+os.Getenv("PATH"))
	}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Run(); err != nil {
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			if status, ok := exitErr.Sys().(syscall.WaitStatus); ok {
				return server.Send(&pulumirpc.RunPluginResponse{
					Output: &pulumirpc.RunPluginResponse_Exitcode{Exitcode: int32(status.ExitStatus())},
				})
			}
		}
		return fmt.Errorf("could not run the Python plugin in %s: %w", info.GetProgramDirectory(), err)
	}
	return closer.Close()
}

func (h *pythonHost) Run(ctx context.Context, req *pulumirpc.RunRequest) (*pulumirpc.RunResponse, error) {
	info := req.GetInfo()
	python := pythonFor(info)
	if venv := virtualenvFor(info); venv != "" {
		if _, err := os.Stat(python); err != nil {
			return &pulumirpc.RunResponse{Error: fmt.Sprintf(
				"the virtualenv %q named in Pulumi.yaml does not exist; run scripts/bootstrap.sh", venv)}, nil
		}
	}

	// The program starts through configBootstrap (below), which runs pulumi-language-python-exec.
	args := []string{"-u", "-c", configBootstrap, h.exec}
	add := func(k, v string) {
		if v != "" {
			args = append(args, "--"+k, v)
		}
	}
	add("monitor", req.GetMonitorAddress())
	add("engine", h.engineAddress)
	add("project", req.GetProject())
	add("stack", req.GetStack())
	add("pwd", req.GetPwd())
	add("dry_run", fmt.Sprintf("%v", req.GetDryRun()))
	add("parallel", fmt.Sprint(req.GetParallel()))
	add("organization", req.GetOrganization())
	if info != nil {
		add("root_directory", info.GetRootDirectory())
	}
	program := "."
	if info != nil && info.GetProgramDirectory() != "" {
		program = info.GetProgramDirectory()
		if ep := info.GetEntryPoint(); ep != "" && ep != "." {
			program = filepath.Join(program, ep)
		}
	} else if req.GetProgram() != "" {
		program = req.GetProgram()
	}
	args = append(args, program)
	args = append(args, req.GetArgs()...)

	env := os.Environ()
	// The config goes through a pipe, not in PULUMI_CONFIG's environment variable: Linux caps one
	// variable at 128 KiB (MAX_ARG_STRLEN), which a stack of a few hundred machines passes. The pipe
	// is the child's fd 3; configBootstrap reads it before the SDK reads its config.
	var config []byte
	if cfg := req.GetConfig(); cfg != nil {
		b, err := json.Marshal(cfg)
		if err != nil {
			return nil, fmt.Errorf("serializing config: %w", err)
		}
		config = b
	}
	if keys := req.GetConfigSecretKeys(); keys != nil {
		b, err := json.Marshal(keys)
		if err != nil {
			return nil, fmt.Errorf("serializing secret keys: %w", err)
		}
		env = append(env, "PULUMI_CONFIG_SECRET_KEYS="+string(b))
	}
	if venv := virtualenvFor(info); venv != "" {
		env = append(env, "VIRTUAL_ENV="+venv, "PATH="+filepath.Join(venv, "bin")+":"+os.Getenv("PATH"))
	}

	cmd := exec.CommandContext(ctx, python, args...)
	cmd.Stdout = os.Stdout
	cmd.Stderr = os.Stderr
	cmd.Env = env
	if config != nil {
		reader, writer, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("opening the config pipe: %w", err)
		}
		cmd.ExtraFiles = []*os.File{reader}
		cmd.Env = append(cmd.Env, "PULUMI_CONFIG_FD=3")
		if err := cmd.Start(); err != nil {
			reader.Close()
			writer.Close()
			return &pulumirpc.RunResponse{Error: fmt.Sprintf("could not run the Python program: %v", err)}, nil
		}
		reader.Close()
		// A program that dies before reading closes its end: the write then fails and is dropped.
		go func() {
			_, _ = writer.Write(config)
			writer.Close()
		}()
	} else if err := cmd.Start(); err != nil {
		return &pulumirpc.RunResponse{Error: fmt.Sprintf("could not run the Python program: %v", err)}, nil
	}
	if err := cmd.Wait(); err != nil {
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			if status, ok := exitErr.Sys().(syscall.WaitStatus); ok {
				// 32: the program already showed the user an actionable message.
				if status.ExitStatus() == 32 {
					return &pulumirpc.RunResponse{Bail: true}, nil
				}
				return &pulumirpc.RunResponse{Error: fmt.Sprintf(
					"Program exited with non-zero exit code: %d", status.ExitStatus())}, nil
			}
		}
		return &pulumirpc.RunResponse{Error: fmt.Sprintf("could not run the Python program: %v", err)}, nil
	}
	return &pulumirpc.RunResponse{}, nil
}

// configBootstrap runs pulumi-language-python-exec (argv[1]) as `python exec ...` would, after
// reading the stack's config from the pipe on PULUMI_CONFIG_FD into this process's PULUMI_CONFIG,
// where the SDK reads it. In-process the environment has no size limit; the program starts no
// process of its own that would inherit the variable.
const configBootstrap = `import os, runpy, sys
fd = os.environ.pop("PULUMI_CONFIG_FD", None)
if fd is not None:
    with os.fdopen(int(fd), "rb") as pipe:
        os.environ["PULUMI_CONFIG"] = pipe.read().decode("utf-8")
sys.argv = sys.argv[1:]
sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
runpy.run_path(sys.argv[0], run_name="__main__")
`
