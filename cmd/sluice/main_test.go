package main

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestWithoutDeadline(t *testing.T) {
	closeErr := errors.New("spool did not close")
	for _, c := range []struct {
		in   error
		want error
	}{
		{nil, nil},
		{context.DeadlineExceeded, nil},
		{fmt.Errorf("shutdown: %w", context.DeadlineExceeded), nil},
		{closeErr, closeErr},
		{errors.Join(context.DeadlineExceeded, closeErr), closeErr},
		{errors.Join(context.DeadlineExceeded, nil), nil},
	} {
		got := withoutDeadline(c.in)
		if (got == nil) != (c.want == nil) || (got != nil && !errors.Is(got, c.want)) || errors.Is(got, context.DeadlineExceeded) {
			t.Errorf("withoutDeadline(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}
