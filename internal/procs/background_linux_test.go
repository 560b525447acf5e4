package procs

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// threadNice reads the calling thread's nice value (field 19 of its stat), or -100
// when it cannot.
func threadNice() int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/stat", unix.Gettid()))
	if err != nil {
		return -100
	}
	// The command name, field 2, may hold spaces: count from the ')' after it.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	n := -100
	if len(f) > 16 {
		fmt.Sscan(f[16], &n)
	}
	return n
}

func TestBackground(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if n := threadNice(); n != 0 {
		t.Skipf("the test runs at nice %d already", n)
	}
	got := make(chan int)
	ok := make(chan bool)
	go func() {
		ok <- Background()
		got <- threadNice()
	}()
	if !<-ok {
		t.Fatal("Background did not change the priority")
	}
	if n := <-got; n != BackgroundNice {
		t.Fatalf("background goroutine's thread at nice %d, want %d", n, BackgroundNice)
	}
	// The demoted thread ended with its goroutine: no other goroutine runs on
	// it. Every thread of the process but that one is still at nice 0.
	for range 100 {
		done := make(chan int)
		go func() {
			runtime.LockOSThread()
			done <- threadNice()
			runtime.UnlockOSThread()
		}()
		if n := <-done; n != 0 {
			t.Fatalf("a later goroutine ran at nice %d", n)
		}
	}
	if n := threadNice(); n != 0 {
		t.Fatalf("the test's own thread at nice %d", n)
	}
}
