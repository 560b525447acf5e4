package procs

import (
	"runtime"

	"golang.org/x/sys/unix"
)

func background() bool {
	// Never unlocked: see Background.
	runtime.LockOSThread()
	// On Linux PRIO_PROCESS with a thread id sets that one thread's nice value.
	// Raising it needs no privilege; failing leaves the thread as it was.
	return unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), BackgroundNice) == nil
}
