package engine

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/bytedance/sonic"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// provisionProfile saves a profile of p's tenant provisioning with typ, key and secret.
func (te *testEngine) provisionProfile(t *testing.T, p *Principal, name, typ, key, secret string) *DeviceProfile {
	t.Helper()
	dp, err := te.SaveDeviceProfile(context.Background(), p, &DeviceProfile{Name: name, ProvisionType: typ, ProvisionDeviceKey: &key,
		ProfileData: DeviceProfileData{ProvisionConfiguration: ProvisionConfiguration{Type: typ, ProvisionDeviceSecret: &secret}}})
	if err != nil {
		t.Fatal(err)
	}
	return dp
}

func (te *testEngine) provision(t *testing.T, req ProvisionRequest) *ProvisionResult {
	t.Helper()
	res, err := te.ProvisionDevice(context.Background(), &req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestProvisionDeviceName: an empty name is an absent one (a random name for a
// new device), as in ThingsBoard; only a name of spaces fails.
func TestProvisionDeviceName(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	te.provisionProfile(t, admin, "create", ProvisionAllowCreate, "create-key", "create-secret")
	str := func(s string) *string { return &s }
	for _, name := range []*string{nil, str("")} {
		res := te.provision(t, ProvisionRequest{DeviceName: name, ProvisionDeviceKey: "create-key", ProvisionDeviceSecret: "create-secret"})
		if res.Status != ProvisionSuccess {
			t.Fatalf("name %v: %+v", name, res)
		}
		d, err := te.DeviceByToken(ctx, res.Token)
		if err != nil || len(d.Name) != 20 {
			t.Fatalf("name %v: device %+v, %v", name, d, err)
		}
	}
	for _, name := range []string{" ", "\t \n"} {
		if res := te.provision(t, ProvisionRequest{DeviceName: &name, ProvisionDeviceKey: "create-key", ProvisionDeviceSecret: "create-secret"}); res.Status != ProvisionFailure {
			t.Fatalf("name %q: %+v", name, res)
		}
	}
}

// TestProvisionPreProvisioned: a pre-provisioned device gets its token
// whatever credentialsType asks (only a new device must be ACCESS_TOKEN), and
// any provisionState it has already, not only "provisioned", is a FAILURE.
func TestProvisionPreProvisioned(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	pre := te.provisionProfile(t, admin, "pre", ProvisionCheckPre, "pre-key", "pre-secret")
	te.provisionProfile(t, admin, "create", ProvisionAllowCreate, "create-key", "create-secret")
	device := func(name, token string) *Device {
		t.Helper()
		d, err := te.SaveDevice(ctx, admin, &Device{Name: name, DeviceProfileID: pre.ID}, token)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	str := func(s string) *string { return &s }

	device("pre-1", "pre-token-1")
	res := te.provision(t, ProvisionRequest{DeviceName: str("pre-1"), CredentialsType: "MQTT_BASIC", ProvisionDeviceKey: "pre-key", ProvisionDeviceSecret: "pre-secret"})
	if res.Status != ProvisionSuccess || res.Token != "pre-token-1" {
		t.Fatalf("pre-provisioned with MQTT_BASIC: %+v", res)
	}
	if res := te.provision(t, ProvisionRequest{DeviceName: str("pre-1"), ProvisionDeviceKey: "pre-key", ProvisionDeviceSecret: "pre-secret"}); res.Status != ProvisionFailure {
		t.Fatalf("provisioned twice: %+v", res)
	}

	for _, state := range []kv.Value{kv.StringValue("pending"), kv.StringValue(""), kv.LongValue(1)} {
		d := device("pre-"+state.Text()+"-state", "")
		if err := te.SaveAttributes(ctx, d.ID.ID, storage.ServerScope, []kv.Entry{{Key: provisionStateKey, Value: state}}); err != nil {
			t.Fatal(err)
		}
		if res := te.provision(t, ProvisionRequest{DeviceName: &d.Name, ProvisionDeviceKey: "pre-key", ProvisionDeviceSecret: "pre-secret"}); res.Status != ProvisionFailure {
			t.Fatalf("provisionState %q: %+v", state.Text(), res)
		}
	}

	// A new device is still only ACCESS_TOKEN.
	res = te.provision(t, ProvisionRequest{DeviceName: str("new"), CredentialsType: "MQTT_BASIC", ProvisionDeviceKey: "create-key", ProvisionDeviceSecret: "create-secret"})
	if res.Status != ProvisionFailure || !strings.Contains(res.ErrorMsg, "ACCESS_TOKEN") {
		t.Fatalf("new device with MQTT_BASIC: %+v", res)
	}
}

// TestProvisionConfigurationRoundTrip: the fields of a provisionConfiguration
// Sluice does not read (X509_CERTIFICATE_CHAIN's) are kept verbatim through a
// save and a read, by either JSON library.
func TestProvisionConfigurationRoundTrip(t *testing.T) {
	const x509 = `{"type":"X509_CERTIFICATE_CHAIN","provisionDeviceSecret":null,` +
		`"allowCreateNewDevicesByX509Certificate":true,"certificateRegExPattern":"(.*)","nested":{"b":[1,2.50,"x"],"a":null}}`
	for name, lib := range map[string]struct {
		marshal   func(any) ([]byte, error)
		unmarshal func([]byte, any) error
	}{"encoding/json": {json.Marshal, json.Unmarshal}, "sonic": {sonic.Marshal, sonic.Unmarshal}} {
		var pd DeviceProfileData
		if err := lib.unmarshal([]byte(`{"provisionConfiguration":`+x509+`}`), &pd); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		c := pd.ProvisionConfiguration
		if c.Type != ProvisionX509Chain || c.ProvisionDeviceSecret != nil || len(c.Other) != 3 {
			t.Fatalf("%s: read %+v", name, c)
		}
		b, err := lib.marshal(c)
		if err != nil || string(b) != x509 {
			t.Fatalf("%s: wrote %s, %v", name, b, err)
		}
		// null leaves it as it is; a wrong type is an error.
		if err := lib.unmarshal([]byte(`{"provisionConfiguration":null}`), &pd); err != nil || pd.ProvisionConfiguration.Type != ProvisionX509Chain {
			t.Fatalf("%s: null: %+v, %v", name, pd.ProvisionConfiguration, err)
		}
		if err := lib.unmarshal([]byte(`{"provisionConfiguration":{"type":1}}`), &pd); err == nil {
			t.Fatalf("%s: a numeric type was read", name)
		}
	}

	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	var in DeviceProfile
	body := `{"name":"x509","provisionType":"X509_CERTIFICATE_CHAIN","provisionDeviceKey":"x509-key","profileData":{"provisionConfiguration":` +
		`{"type":"X509_CERTIFICATE_CHAIN","provisionDeviceSecret":"s","certificateRegExPattern":"CN=(.*?)$","allowCreateNewDevicesByX509Certificate":true}}}`
	if err := sonic.Unmarshal([]byte(body), &in); err != nil {
		t.Fatal(err)
	}
	saved, err := te.SaveDeviceProfile(ctx, admin, &in)
	if err != nil {
		t.Fatal(err)
	}
	got, err := te.GetDeviceProfile(ctx, admin, saved.ID.ID)
	if err != nil {
		t.Fatal(err)
	}
	b, err := sonic.Marshal(got.ProfileData.ProvisionConfiguration)
	const want = `{"type":"X509_CERTIFICATE_CHAIN","provisionDeviceSecret":"s","allowCreateNewDevicesByX509Certificate":true,"certificateRegExPattern":"CN=(.*?)$"}`
	if err != nil || string(b) != want {
		t.Fatalf("read back %s, %v\nwant %s", b, err, want)
	}
	// Saved again as read: still there.
	if _, err := te.SaveDeviceProfile(ctx, admin, got); err != nil {
		t.Fatal(err)
	}
	got, err = te.GetDeviceProfile(ctx, admin, saved.ID.ID)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := sonic.Marshal(got.ProfileData.ProvisionConfiguration); string(b) != want {
		t.Fatalf("saved back: %s", b)
	}
	// Within the whole profile, as the API writes it.
	if b, _ := sonic.Marshal(got); !strings.Contains(string(b), `"provisionConfiguration":`+want) {
		t.Fatalf("profile %s", b)
	}
}
