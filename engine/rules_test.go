package engine

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"
)

func TestMatchRule(t *testing.T) {
	p1, p2 := uuid.New(), uuid.New()
	wide := &RPCRule{Method: "m"}
	forP1 := &RPCRule{Method: "m", DeviceProfileID: &p1}
	other := &RPCRule{Method: "n", DeviceProfileID: &p2}
	f := func(rules []*RPCRule, profile uuid.UUID, method string, want *RPCRule) {
		t.Helper()
		if got := matchRule(rules, profile, method); got != want {
			t.Fatalf("matchRule(%s, %s) = %+v, want %+v", profile, method, got, want)
		}
	}
	f(nil, p1, "m", nil)
	f([]*RPCRule{wide, forP1, other}, p1, "m", forP1)
	f([]*RPCRule{forP1, wide, other}, p1, "m", forP1)
	f([]*RPCRule{wide, forP1, other}, p2, "m", wide)
	f([]*RPCRule{forP1, other}, p2, "m", nil)
	f([]*RPCRule{wide, forP1, other}, p2, "n", other)
	f([]*RPCRule{wide, forP1, other}, p1, "n", nil)
	f([]*RPCRule{wide}, p1, "M", nil) // method names are case-sensitive
}

// TestClientRPCRules drives the engine directly: validation on save, the
// built-in, a rule, and the error codes the HTTP front end turns into statuses.
func TestClientRPCRules(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	dev, err := te.DeviceByToken(ctx, te.demo.DemoDeviceToken)
	if err != nil {
		t.Fatal(err)
	}
	code := func(err error) Code {
		var ee *Error
		if !errors.As(err, &ee) {
			t.Fatalf("not an engine error: %v", err)
		}
		return ee.Code
	}
	save := func(p *Principal, method, script, profile string) (*RPCRule, error) {
		return te.SaveRPCRule(ctx, p, &RPCRuleInput{Method: method, Script: script, DeviceProfileID: json.RawMessage(profile)})
	}
	for _, c := range []struct {
		method, script, profile string
		want                    Code
	}{
		{"", "return 1", "", CodeBadRequestParams},
		{" \t", "return 1", "", CodeBadRequestParams},
		{strings.Repeat("m", 256), "return 1", "", CodeBadRequestParams},
		{"m", "return {", "", CodeBadRequestParams},
		{"m", "return 1", `"not-a-uuid"`, CodeBadRequestParams},
		{"m", "return 1", `{"entityType":"DEVICE_PROFILE","id":"` + uuid.NewString() + `"}`, CodeBadRequestParams},
		{"m", "return 1", `7`, CodeBadRequestParams},
	} {
		if _, err := save(admin, c.method, c.script, c.profile); code(err) != c.want {
			t.Fatalf("save %q %q %s: %v", c.method, c.script, c.profile, err)
		}
	}
	if _, err := save(te.customerUser(t), "m", "return 1", ""); code(err) != CodePermissionDenied {
		t.Fatalf("customer save: %v", err)
	}
	if _, err := save(te.sysadmin(t), "m", "return 1", ""); code(err) != CodePermissionDenied {
		t.Fatalf("sysadmin save: %v", err)
	}

	reply, err := te.CallClientRPC(ctx, dev, MethodGetCurrentTime, nil)
	if err != nil || !strings.HasPrefix(string(reply), `{"time":`) || !json.Valid(reply) {
		t.Fatalf("built-in: %s, %v", reply, err)
	}
	if _, err := te.CallClientRPC(ctx, dev, "nope", nil); code(err) != CodeItemNotFound || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("no rule: %v", err)
	}
	profile := `{"entityType":"DEVICE_PROFILE","id":"` + dev.DeviceProfileID.ID.String() + `"}`
	if _, err := save(admin, "add", "return params.a + params.b + device.name", profile); err != nil {
		t.Fatal(err)
	}
	if reply, err := te.CallClientRPC(ctx, dev, "add", []byte(`{"a":1,"b":2}`)); err != nil || string(reply) != `"3`+dev.Name+`"` {
		t.Fatalf("rule: %s, %v", reply, err)
	}
	// A method is matched as written, spaces included.
	if _, err := save(admin, " spaced ", "return 2", ""); err != nil {
		t.Fatal(err)
	}
	if reply, err := te.CallClientRPC(ctx, dev, " spaced ", nil); err != nil || string(reply) != "2" {
		t.Fatalf("spaced rule: %s, %v", reply, err)
	}
	if _, err := te.CallClientRPC(ctx, dev, "spaced", nil); code(err) != CodeItemNotFound {
		t.Fatalf("spaced rule by its trimmed name: %v", err)
	}
	if _, err := save(admin, "fail", "throw 1", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := te.CallClientRPC(ctx, dev, "fail", nil); code(err) != CodeGeneral {
		t.Fatalf("throwing rule: %v", err)
	}
}
