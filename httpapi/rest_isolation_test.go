package httpapi

import (
	"strings"
	"testing"

	"github.com/sluice-iot/sluice/engine"
)

// req is one request of an isolation matrix and the status it must get.
type req struct {
	method, path string
	body         any
	status       int
}

// run sends every request as auth and checks the status; name labels failures.
func (n *testNode) run(name, auth string, reqs []req) {
	n.t.Helper()
	for _, r := range reqs {
		got, out := n.do(r.method, r.path, auth, r.body)
		if got != r.status {
			n.t.Errorf("%s: %s %s: %d, want %d: %s", name, r.method, r.path, got, r.status, out)
		}
	}
}

// TestTenantIsolation proves that tenant A, with a JWT or an API key, can read,
// write, command or delete nothing of tenant B, and that B's data is intact after.
func TestTenantIsolation(t *testing.T) {
	n := startTestNode(t)
	ta := n.tenant()
	tenantB, tb := n.otherTenant("B")

	// Everything of tenant B.
	var cust engine.Customer
	n.decode(n.expect("POST", "/api/customer", tb, map[string]string{"title": "BC"}, 200, ""), &cust)
	var dev engine.Device
	n.decode(n.expect("POST", "/api/device?accessToken=B_TOKEN", tb, map[string]any{"name": "bd", "customerId": cust.ID}, 200, ""), &dev)
	var creds engine.DeviceCredentials
	n.decode(n.expect("GET", "/api/device/"+dev.ID.ID.String()+"/credentials", tb, nil, 200, ""), &creds)
	n.expect("POST", "/api/v1/B_TOKEN/telemetry", "", `{"t":1}`, 200, "")
	n.expect("POST", "/api/plugins/telemetry/DEVICE/"+dev.ID.ID.String()+"/attributes/SERVER_SCOPE", tb, `{"a":1}`, 200, "")
	var prof engine.DeviceProfile
	n.decode(n.expect("POST", "/api/deviceProfile", tb, map[string]string{"name": "bp"}, 200, ""), &prof)
	bUser, _ := n.newUser(tb, map[string]any{"email": "bu@example.com", "authority": "CUSTOMER_USER", "customerId": cust.ID})
	var bKey engine.APIKey
	n.decode(n.expect("POST", "/api/apiKey", tb, map[string]any{"description": "b", "enabled": true}, 200, ""), &bKey)
	bAdmin := n.userID(tb)

	d := "/api/device/" + dev.ID.ID.String()
	tel := "/api/plugins/telemetry/DEVICE/" + dev.ID.ID.String()
	c := "/api/customer/" + cust.ID.ID.String()
	u := "/api/user/" + bUser.ID.ID.String()
	k := "/api/apiKey/" + bKey.ID.ID.String()
	p := "/api/deviceProfile/" + prof.ID.ID.String()
	tn := "/api/tenant/" + tenantB.ID.ID.String()
	page := "?pageSize=10&page=0"
	aDev := n.Demo.DemoDeviceID.String()
	aCust := n.Demo.DemoCustomerID.String()
	creds.CredentialsID = "STOLEN"
	devUpdate := dev
	devUpdate.Label = "x"
	custUpdate := cust
	custUpdate.Title = "x"
	userUpdate := bUser
	userUpdate.FirstName = "x"
	profUpdate := prof
	profUpdate.Description = "x"
	keyUpdate := bKey.APIKeyInfo
	keyUpdate.Enabled = false

	matrix := []req{
		// Read.
		{"GET", d, nil, 403},
		{"GET", d + "/credentials", nil, 403},
		{"GET", tel + "/values/timeseries?keys=t", nil, 403},
		{"GET", tel + "/values/timeseries?keys=t&startTs=0&endTs=9999999999999", nil, 403},
		{"GET", tel + "/keys/timeseries", nil, 403},
		{"GET", tel + "/values/attributes", nil, 403},
		{"GET", tel + "/values/attributes/SERVER_SCOPE", nil, 403},
		{"GET", tel + "/keys/attributes", nil, 403},
		{"GET", "/api/tenant/device?deviceName=bd", nil, 404},
		{"GET", c, nil, 403},
		{"GET", c + "/users" + page, nil, 403},
		{"GET", c + "/devices" + page, nil, 403},
		{"GET", u, nil, 403},
		{"GET", u + "/activationLink", nil, 403},
		{"GET", tn, nil, 403},
		{"GET", tn + "/users" + page, nil, 403},
		{"GET", "/api/plugins/telemetry/TENANT/" + tenantB.ID.ID.String() + "/values/attributes", nil, 403},
		{"GET", "/api/plugins/telemetry/CUSTOMER/" + cust.ID.ID.String() + "/values/timeseries?keys=t", nil, 403},
		{"GET", "/api/apiKeys/" + bAdmin.ID.String() + page, nil, 403},
		{"GET", p, nil, 403},
		// Write.
		{"POST", "/api/device", devUpdate, 403},
		{"POST", "/api/device/credentials", creds, 403},
		{"POST", tel + "/timeseries/ANY", `{"t":2}`, 403},
		{"POST", tel + "/attributes/SERVER_SCOPE", `{"a":2}`, 403},
		{"POST", "/api/customer", custUpdate, 403},
		{"POST", "/api/user", userUpdate, 403},
		{"POST", "/api/user", map[string]any{"email": "x@example.com", "authority": "CUSTOMER_USER", "customerId": cust.ID}, 403},
		{"POST", "/api/deviceProfile", profUpdate, 403},
		{"POST", "/api/apiKey", map[string]any{"userId": bAdmin, "description": "mine now", "enabled": true}, 403},
		{"POST", "/api/apiKey", keyUpdate, 403},
		{"PUT", k + "/description", "mine", 403},
		{"PUT", k + "/enabled/false", nil, 403},
		{"POST", c + "/device/" + aDev, nil, 403},
		{"POST", "/api/customer/" + aCust + "/device/" + dev.ID.ID.String(), nil, 403},
		{"DELETE", "/api/customer/device/" + dev.ID.ID.String(), nil, 403},
		// Command: shared attributes are what a device is told.
		{"POST", tel + "/attributes/SHARED_SCOPE", `{"setpoint":5}`, 403},
		{"POST", tel + "/SHARED_SCOPE", `{"setpoint":5}`, 403},
		// Delete.
		{"DELETE", tel + "/timeseries/delete?keys=t&deleteAllDataForKeys=true", nil, 403},
		{"DELETE", tel + "/SERVER_SCOPE?keys=a", nil, 403},
		{"DELETE", k, nil, 403},
		{"DELETE", u, nil, 403},
		{"DELETE", c, nil, 403},
		{"DELETE", p, nil, 403},
		{"DELETE", d, nil, 403},
		{"DELETE", tn, nil, 403},
	}
	var aKey engine.APIKey
	n.decode(n.expect("POST", "/api/apiKey", ta, map[string]any{"description": "a", "enabled": true}, 200, ""), &aKey)
	n.run("tenant A (JWT)", ta, matrix)
	n.run("tenant A (API key)", "ApiKey "+*aKey.Value, matrix)

	// Tenant B still has all of it, unchanged.
	var got engine.Device
	n.decode(n.expect("GET", d, tb, nil, 200, ""), &got)
	if got.Label != "" || got.CustomerID != cust.ID {
		t.Errorf("device changed: %+v", got)
	}
	latest := string(n.expect("GET", tel+"/values/timeseries?keys=t", tb, nil, 200, ""))
	if !strings.Contains(latest, `"value":"1"`) {
		t.Errorf("telemetry changed: %s", latest)
	}
	attrs := string(n.expect("GET", tel+"/values/attributes/SERVER_SCOPE", tb, nil, 200, ""))
	if !strings.Contains(attrs, `"key":"a"`) || strings.Contains(attrs, "setpoint") {
		t.Errorf("attributes changed: %s", attrs)
	}
	n.expect("POST", "/api/v1/B_TOKEN/telemetry", "", `{"t":3}`, 200, "")
	n.expect("GET", "/api/auth/user", "ApiKey "+*bKey.Value, nil, 200, "")
	n.expect("GET", c, tb, nil, 200, "")
	n.expect("GET", u, tb, nil, 200, "")
	n.expect("GET", p, tb, nil, 200, "")
}

// TestCustomerIsolation proves a customer user reaches only its customer's devices,
// and the system administrator no telemetry at all.
func TestCustomerIsolation(t *testing.T) {
	n := startTestNode(t)
	ta, cu, sys := n.tenant(), n.customer(), n.sysadmin()
	var other engine.Customer
	n.decode(n.expect("POST", "/api/customer", ta, map[string]string{"title": "Customer B"}, 200, ""), &other)
	var otherDev engine.Device
	n.decode(n.expect("POST", "/api/device", ta, map[string]any{"name": "cb", "customerId": other.ID}, 200, ""), &otherDev)
	own := n.Demo.CustomerDeviceID.String()
	page := "?pageSize=10&page=0"

	deviceReqs := func(id string, status int) []req {
		tel := "/api/plugins/telemetry/DEVICE/" + id
		return []req{
			{"GET", "/api/device/" + id, nil, status},
			{"GET", "/api/device/" + id + "/credentials", nil, status},
			{"GET", tel + "/values/timeseries?keys=t", nil, status},
			{"GET", tel + "/keys/timeseries", nil, status},
			{"GET", tel + "/values/attributes", nil, status},
			{"POST", tel + "/timeseries/ANY", `{"t":1}`, status},
			{"POST", tel + "/attributes/SHARED_SCOPE", `{"s":1}`, status},
		}
	}
	n.run("customer user, own device", cu, deviceReqs(own, 200))
	n.run("customer user, other customer's device", cu, deviceReqs(otherDev.ID.ID.String(), 403))
	n.run("customer user, unassigned device", cu, deviceReqs(n.Demo.DemoDeviceID.String(), 403))
	n.run("customer user, lists", cu, []req{
		{"GET", "/api/customer/" + n.Demo.DemoCustomerID.String() + "/devices" + page, nil, 200},
		{"GET", "/api/customer/" + other.ID.ID.String() + "/devices" + page, nil, 403},
		{"GET", "/api/customer/" + other.ID.ID.String(), nil, 403},
		{"GET", "/api/tenant/devices" + page, nil, 403},
		{"DELETE", "/api/device/" + own, nil, 403},
		{"POST", "/api/customer/" + n.Demo.DemoCustomerID.String() + "/device/" + otherDev.ID.ID.String(), nil, 403},
	})

	tel := "/api/plugins/telemetry/DEVICE/" + n.Demo.DemoDeviceID.String()
	n.run("system administrator", sys, []req{
		{"GET", tel + "/values/timeseries?keys=t", nil, 403},
		{"GET", tel + "/values/timeseries?keys=t&startTs=0&endTs=9999999999999", nil, 403},
		{"GET", tel + "/values/attributes", nil, 403},
		{"GET", tel + "/keys/timeseries", nil, 403},
		{"POST", tel + "/timeseries/ANY", `{"t":1}`, 403},
		{"DELETE", tel + "/timeseries/delete?keys=t&deleteAllDataForKeys=true", nil, 403},
		{"GET", "/api/device/" + n.Demo.DemoDeviceID.String(), nil, 403},
	})
	n.expect("GET", tel+"/values/timeseries?keys=t", sys, nil, 403, "System administrator is not allowed to perform this operation!")
}
