package httpapi

import (
	"testing"

	"github.com/sluice-iot/sluice/engine"
)

// TestReportRESTRateLimit: the report API counts against the tenant's REST
// limit (tenantServerRestLimitsConfiguration) like every other REST request of
// a tenant user, and is refused with 429 code 33 past it.
func TestReportRESTRateLimit(t *testing.T) {
	n := startTestNode(t)
	auth := n.tenant()
	n.expect("POST", "/api/device", auth, map[string]string{"name": "limited", "type": "meter"}, 200, "")
	var v struct{ ID struct{ ID string } }
	n.decode(n.expect("POST", "/api/analytics/view", auth, `{"name":"limited","source":{"deviceProfile":"meter"},
		"fields":[{"label":"Device","source":"ENTITY_NAME"}]}`, 200, ""), &v)
	body := `{"viewConfigId":"` + v.ID.ID + `"}`
	path := "/apiAnalytics/publicApi/buildReport"

	n.limitDemoTenant(`{"tenantServerRestLimitsConfiguration":"2:3600"}`)

	n.expect("POST", path, auth, body, 200, "")
	n.expect("POST", "/apiTrendz/publicApi/buildReport", auth, body, 200, "")
	var e apiError
	n.decode(n.expect("POST", path, auth, body, 429, "Too many requests for current tenant!"), &e)
	if e.ErrorCode != int(engine.CodeTooManyRequests) {
		t.Fatalf("429 code %d", e.ErrorCode)
	}
	// The same bucket as the rest of the REST API.
	n.expect("GET", "/api/auth/user", auth, nil, 429, "Too many requests for current tenant!")
}

// TestDeviceOverLimitNotParsed: a device whose write limit has no room left
// is refused before its body is parsed (a malformed one is 429, not 400), so
// a device over its limit costs the node little.
func TestDeviceOverLimitNotParsed(t *testing.T) {
	n := startTestNode(t)
	n.limitDemoTenant(`{"transportDeviceTelemetryMsgRateLimit":"1:3600"}`)

	tel := "/api/v1/" + n.Demo.DemoDeviceToken + "/telemetry"
	n.expect("POST", tel, "", `{"a":1}`, 200, "")
	n.expect("POST", tel, "", `{"a":`, 429, "Too many requests for current device!")
	n.expect("POST", "/api/v1/"+n.Demo.DemoDeviceToken+"/attributes", "", `not json`, 429, "Too many requests for current device!")
}

// limitDemoTenant gives the demo tenant a new tenant profile with the
// configuration conf (JSON).
func (n *testNode) limitDemoTenant(conf string) {
	n.t.Helper()
	sys := n.sysadmin()
	var tp struct{ ID engine.EntityID }
	n.decode(n.expect("POST", "/api/tenantProfile", sys,
		`{"name":"limits","profileData":{"configuration":`+conf+`}}`, 200, ""), &tp)
	var tenant map[string]any
	n.decode(n.expect("GET", "/api/tenant/"+n.Demo.DemoTenantID.String(), sys, nil, 200, ""), &tenant)
	tenant["tenantProfileId"] = tp.ID
	n.expect("POST", "/api/tenant", sys, tenant, 200, "")
}
