package redistest

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal kills the server if the test binary dies without
// running its cleanups (a crash or a timeout panic), so no server outlives it.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
