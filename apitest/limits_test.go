package apitest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-iot/sluice/config"
)

// setTenantLimits gives the demo tenant a new tenant profile whose configuration
// is conf (as the system administrator, who is never limited).
func (n *testNode) setTenantLimits(conf string) {
	n.t.Helper()
	sys := n.login("sysadmin@thingsboard.org", "sysadmin")
	var tp struct{ ID entityID }
	n.must(200, "POST", "/api/tenantProfile",
		fmt.Sprintf(`{"name":"limits-%d","profileData":{"configuration":%s}}`, time.Now().UnixNano(), conf), sys).JSON(n.t, &tp)
	var me struct{ TenantID entityID }
	n.must(200, "GET", "/api/auth/user", "", n.tenantAuth()).JSON(n.t, &me)
	var tenant map[string]any
	n.must(200, "GET", "/api/tenant/"+me.TenantID.ID, "", sys).JSON(n.t, &tenant)
	tenant["tenantProfileId"] = tp.ID
	b, _ := json.Marshal(tenant)
	n.must(200, "POST", "/api/tenant", string(b), sys)
}

// limited checks a 429 answer: Retry-After of at least a second, the JSON error
// body with code 33 and message msg.
func limited(t *testing.T, r response, msg string) {
	t.Helper()
	if got := errorBody(t, r, 429); got != msg {
		t.Fatalf("429 message %q, want %q", got, msg)
	}
	var e struct{ ErrorCode int }
	json.Unmarshal(r.Body, &e)
	if e.ErrorCode != 33 {
		t.Fatalf("429 errorCode %d, want 33", e.ErrorCode)
	}
	if s, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || s < 1 {
		t.Fatalf("Retry-After %q, want whole seconds ≥ 1", r.Header.Get("Retry-After"))
	}
}

// TestDefaultsLimitNothing: the default tenant profile has every limit null.
func TestDefaultsLimitNothing(t *testing.T) {
	n := startNode(t, nil)
	sys := n.login("sysadmin@thingsboard.org", "sysadmin")
	var info struct {
		ID   entityID
		Name string
	}
	n.must(200, "GET", "/api/tenantProfileInfo/default", "", sys).JSON(t, &info)
	var tp struct {
		Default     bool
		ProfileData struct{ Configuration map[string]any }
	}
	n.must(200, "GET", "/api/tenantProfile/"+info.ID.ID, "", sys).JSON(t, &tp)
	if !tp.Default || info.Name != "Default" || info.ID.EntityType != "TENANT_PROFILE" {
		t.Fatalf("default tenant profile: %+v %+v", info, tp)
	}
	for _, k := range []string{"transportTenantMsgRateLimit", "transportDeviceTelemetryDataPointsRateLimit", "tenantServerRestLimitsConfiguration"} {
		if v, ok := tp.ProfileData.Configuration[k]; !ok || v != nil {
			t.Fatalf("default %s = %v (present %v), want null", k, v, ok)
		}
	}
	auth := n.tenantAuth()
	for i := range 200 {
		n.must(200, "POST", "/api/v1/"+n.Token+"/telemetry", fmt.Sprintf(`{"t":%d,"u":1}`, i))
		n.must(200, "GET", "/api/auth/user", "", auth)
	}
	// A tenant admin may not read tenant profiles, as in ThingsBoard.
	n.must(403, "GET", "/api/tenantProfiles?pageSize=10&page=0", "", auth)
}

// TestDeviceRateLimit: past its own limit a device gets 429 with Retry-After and
// the JSON error body; another device of the tenant is unaffected.
func TestDeviceRateLimit(t *testing.T) {
	n := startNode(t, nil)
	n.setTenantLimits(`{"transportDeviceTelemetryMsgRateLimit":"2:3600","transportDeviceMsgRateLimit":"1:3600"}`)
	auth := n.tenantAuth()
	_, a := n.createDevice(auth, "limited-a")
	_, b := n.createDevice(auth, "limited-b")
	n.must(200, "POST", "/api/v1/"+a+"/telemetry", `{"t":1}`)
	n.must(200, "POST", "/api/v1/"+a+"/attributes", `{"fw":"1"}`) // attributes are telemetry messages too
	limited(t, n.do("POST", "/api/v1/"+a+"/telemetry", `{"t":2}`), "Too many requests for current device!")
	n.must(200, "POST", "/api/v1/"+b+"/telemetry", `{"t":1}`)

	// Other device requests count against the message limit.
	n.must(200, "GET", "/api/v1/"+a+"/attributes?clientKeys=fw", "")
	limited(t, n.do("GET", "/api/v1/"+a+"/attributes?clientKeys=fw", ""), "Too many requests for current device!")
	limited(t, n.do("GET", "/api/v1/"+a+"/attributes/updates?timeout=1", ""), "Too many requests for current device!")
	n.must(200, "GET", "/api/v1/"+b+"/attributes?clientKeys=fw", "")

	// A refused write stored nothing.
	var latest map[string][]struct{ Value any }
	id, _ := n.deviceByName(auth, "limited-a")
	n.must(200, "GET", "/api/plugins/telemetry/DEVICE/"+id+"/values/timeseries?keys=t", "", auth).JSON(t, &latest)
	if len(latest["t"]) != 1 || fmt.Sprint(latest["t"][0].Value) != "1" {
		t.Fatalf("latest t = %v, want 1", latest)
	}
}

// deviceByName returns the id of the tenant's device of that name.
func (n *testNode) deviceByName(auth, name string) (string, bool) {
	n.t.Helper()
	var dev struct{ ID entityID }
	r := n.do("GET", "/api/tenant/device?deviceName="+name, "", auth)
	if r.Status != 200 {
		return "", false
	}
	r.JSON(n.t, &dev)
	return dev.ID.ID, true
}

// TestTenantRateLimit: a tenant limit counts the requests of all its devices.
func TestTenantRateLimit(t *testing.T) {
	n := startNode(t, nil)
	n.setTenantLimits(`{"transportTenantTelemetryMsgRateLimit":"3:3600"}`)
	auth := n.tenantAuth()
	_, a := n.createDevice(auth, "tenant-a")
	_, b := n.createDevice(auth, "tenant-b")
	n.must(200, "POST", "/api/v1/"+a+"/telemetry", `{"t":1}`)
	n.must(200, "POST", "/api/v1/"+b+"/telemetry", `{"t":1}`)
	n.must(200, "POST", "/api/v1/"+a+"/telemetry", `{"t":2}`)
	limited(t, n.do("POST", "/api/v1/"+b+"/telemetry", `{"t":2}`), "Too many requests for current tenant!")
	limited(t, n.do("POST", "/api/v1/"+n.Token+"/telemetry", `{"t":2}`), "Too many requests for current tenant!")
	// Another limit of the same tenant (plain messages) is a separate bucket.
	n.must(200, "GET", "/api/v1/"+a+"/attributes", "")
}

// TestDataPointsRateLimit: telemetry consumes one token per data point.
func TestDataPointsRateLimit(t *testing.T) {
	n := startNode(t, nil)
	n.setTenantLimits(`{"transportDeviceTelemetryDataPointsRateLimit":"5:3600"}`)
	auth := n.tenantAuth()
	_, a := n.createDevice(auth, "points-a")
	n.must(200, "POST", "/api/v1/"+a+"/telemetry", `[{"ts":1000,"values":{"x":1,"y":2}},{"ts":2000,"values":{"x":3,"y":4}}]`)
	limited(t, n.do("POST", "/api/v1/"+a+"/telemetry", `{"x":1,"y":2}`), "Too many requests for current device!")
	n.must(200, "POST", "/api/v1/"+a+"/telemetry", `{"x":1}`)
	// A batch larger than the capacity never fits: a 429 that says so, with no
	// Retry-After a client would wait on in vain.
	_, b := n.createDevice(auth, "points-b")
	r := n.do("POST", "/api/v1/"+b+"/telemetry", `{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6}`)
	if msg := errorBody(t, r, 429); msg != "Too many requests for current device! The request counts 6, more than the limit 5:3600 allows at once." {
		t.Fatalf("batch over the capacity: %q", msg)
	}
	if r.Header.Get("Retry-After") != "" {
		t.Fatalf("Retry-After %q for a batch over the capacity, want none", r.Header.Get("Retry-After"))
	}
}

// TestRESTRateLimits: REST calls count per tenant and, for customer users, per
// customer (429 code 33 with ThingsBoard's messages); the system administrator is
// never limited.
func TestRESTRateLimits(t *testing.T) {
	n := startNode(t, nil)
	n.setTenantLimits(`{"tenantServerRestLimitsConfiguration":"4:3600","customerServerRestLimitsConfiguration":"2:3600"}`)
	customer := n.login("customer@thingsboard.org", "customer")
	n.must(200, "GET", "/api/auth/user", "", customer)
	n.must(200, "GET", "/api/auth/user", "", customer)
	limited(t, n.do("GET", "/api/auth/user", "", customer), "Too many requests for current customer!")

	tenant := n.tenantAuth() // logging in is not a limited call
	n.must(200, "GET", "/api/auth/user", "", tenant)
	n.must(200, "GET", "/api/auth/user", "", tenant) // the customer's refused call gave its tenant token back
	limited(t, n.do("GET", "/api/auth/user", "", tenant), "Too many requests for current tenant!")
	// The tenant limit applies to its customers' users too, and is checked first.
	limited(t, n.do("GET", "/api/auth/user", "", customer), "Too many requests for current tenant!")

	sys := n.login("sysadmin@thingsboard.org", "sysadmin")
	for range 50 {
		n.must(200, "GET", "/api/auth/user", "", sys)
	}
	// The device API of the tenant has limits of its own (none here).
	n.must(200, "POST", "/api/v1/"+n.Token+"/telemetry", `{"t":1}`)
}

// TestTenantProfileREST: saving validates the limit strings, and the default
// profile and profiles in use cannot be deleted.
func TestTenantProfileREST(t *testing.T) {
	n := startNode(t, nil)
	sys := n.login("sysadmin@thingsboard.org", "sysadmin")
	r := n.do("POST", "/api/tenantProfile", `{"name":"bad","profileData":{"configuration":{"transportDeviceMsgRateLimit":"10/1"}}}`, sys)
	if msg := errorBody(t, r, 400); !strings.Contains(msg, "transportDeviceMsgRateLimit") {
		t.Fatalf("bad limit message %q does not name the field", msg)
	}
	var tp struct {
		ID      entityID
		Version int64
	}
	n.must(200, "POST", "/api/tenantProfile", `{"name":"p1","profileData":{"configuration":{"type":"DEFAULT","maxDevices":5,"transportDeviceMsgRateLimit":"10:1"}}}`, sys).JSON(t, &tp)
	var got struct {
		Name        string
		ProfileData struct{ Configuration map[string]any }
	}
	n.must(200, "GET", "/api/tenantProfile/"+tp.ID.ID, "", sys).JSON(t, &got)
	if got.ProfileData.Configuration["maxDevices"] != 5.0 || got.ProfileData.Configuration["transportDeviceMsgRateLimit"] != "10:1" {
		t.Fatalf("configuration not kept: %v", got.ProfileData.Configuration)
	}
	var page struct{ TotalElements int }
	n.must(200, "GET", "/api/tenantProfiles?pageSize=10&page=0", "", sys).JSON(t, &page)
	if page.TotalElements != 2 {
		t.Fatalf("%d tenant profiles, want Default and p1", page.TotalElements)
	}
	var info struct{ ID entityID }
	n.must(200, "GET", "/api/tenantProfileInfo/default", "", sys).JSON(t, &info)
	errorBody(t, n.do("DELETE", "/api/tenantProfile/"+info.ID.ID, "", sys), 400)
	n.must(200, "POST", "/api/tenant", `{"title":"uses p1","tenantProfileId":{"entityType":"TENANT_PROFILE","id":"`+tp.ID.ID+`"}}`, sys)
	errorBody(t, n.do("DELETE", "/api/tenantProfile/"+tp.ID.ID, "", sys), 400)
	// An id that names no profile: the default's with its last digit changed (to
	// one it does not already have).
	last := byte('0')
	if info.ID.ID[35] == last {
		last = '1'
	}
	unknown := info.ID.ID[:35] + string(last)
	errorBody(t, n.do("POST", "/api/tenant", `{"title":"x","tenantProfileId":{"entityType":"TENANT_PROFILE","id":"`+unknown+`"}}`, sys), 400)
	errorBody(t, n.do("GET", "/api/tenantProfile/"+tp.ID.ID, "", n.tenantAuth()), 403)
}

// TestSlowHeaderClientIsCut: a client that sends half a request header and stalls
// loses its connection after SLUICE_HTTP_HEADER_TIMEOUT (the read timeout is far
// longer than the test's bound), while a long poll that outlasts the header
// timeout still answers.
func TestSlowHeaderClientIsCut(t *testing.T) {
	n := startNode(t, func(c *config.Config) {
		c.HTTP.HeaderTimeout = 200
		c.HTTP.ReadTimeout = 120000
	})
	addr := strings.TrimPrefix(n.URL, "http://")
	for _, partial := range []string{
		"GET /healthz HTTP/1.1\r\nHost: sluice\r\n", // headers never end
		"", // connected, sends nothing
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte(partial)); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(20 * time.Second)) // generous: only "closed, not hung" is tested
		_, err = io.Copy(io.Discard, c)
		c.Close()
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("connection with %q still open after 20 s", partial)
		}
	}
	// A complete request on a fresh connection is served, and a poll longer than
	// the header timeout waits its own timeout (nothing is read while it waits).
	n.must(200, "GET", "/healthz", "")
	timedOut(t, n.poll(n.Token, "?timeout=1000"))
}

// TestLongPollCaps: past SLUICE_LONG_POLL_MAX_PER_DEVICE a device's poll (either
// kind) answers 429 with Retry-After; past SLUICE_LONG_POLL_MAX_PER_NODE any poll
// answers 503 with Retry-After.
func TestLongPollCaps(t *testing.T) {
	n := startNode(t, func(c *config.Config) {
		c.HTTP.LongPollMaxPerDevice = 2
		c.HTTP.LongPollMaxPerNode = 3
	})
	auth := n.tenantAuth()
	_, a := n.createDevice(auth, "polls-a")
	_, b := n.createDevice(auth, "polls-b")
	_, c := n.createDevice(auth, "polls-c")
	held := []<-chan response{n.openPoll(a, "?timeout=30000"), n.openRPCPoll(a)}
	limited(t, n.do("GET", "/api/v1/"+a+"/attributes/updates?timeout=30000", ""),
		"Too many long polls for current device! At most 2 at once (SLUICE_LONG_POLL_MAX_PER_DEVICE)")
	limited(t, n.do("GET", "/api/v1/"+a+"/rpc?timeout=30000", ""),
		"Too many long polls for current device! At most 2 at once (SLUICE_LONG_POLL_MAX_PER_DEVICE)")
	held = append(held, n.openPoll(b, "?timeout=30000"))

	r := n.do("GET", "/api/v1/"+c+"/attributes/updates?timeout=30000", "")
	if msg := errorBody(t, r, 503); !strings.Contains(msg, "SLUICE_LONG_POLL_MAX_PER_NODE") {
		t.Fatalf("node cap message %q does not name the setting", msg)
	}
	if r.Header.Get("Retry-After") == "" {
		t.Fatal("503 past the node cap without Retry-After")
	}
	// Other device requests are not polls.
	n.must(200, "POST", "/api/v1/"+c+"/telemetry", `{"t":1}`)

	// A poll that ends frees its place.
	n.must(200, "POST", "/api/plugins/telemetry/DEVICE/"+mustID(n, auth, "polls-b")+"/SHARED_SCOPE", `{"go":1}`, auth)
	delivered(t, held[2], `{"go":1}`)
	n.waitPolls(2)
	held = append(held, n.openPoll(c, "?timeout=30000"))
	if got := n.node.Engine().OpenPolls(); got != 3 {
		t.Fatalf("open polls %d, want 3", got)
	}
}

func mustID(n *testNode, auth, name string) string {
	n.t.Helper()
	id, ok := n.deviceByName(auth, name)
	if !ok {
		n.t.Fatalf("no device %s", name)
	}
	return id
}

// TestLimitsFollowProfileAcrossNodes: a profile change made on one node limits
// the tenant's devices on another at once (the eviction crosses over Redis);
// each node counts its own requests.
func TestLimitsFollowProfileAcrossNodes(t *testing.T) {
	d := newDeployment(t)
	a := d.node(t, nil)
	b := d.node(t, nil)
	auth := a.tenantAuth()
	_, tok := a.createDevice(auth, "cluster-limited")
	b.must(200, "POST", "/api/v1/"+tok+"/telemetry", `{"t":0}`) // b caches the (unlimited) limits
	a.setTenantLimits(`{"transportDeviceTelemetryMsgRateLimit":"1:3600"}`)
	eventually(t, 5*time.Second, "node b applies the new profile", func() bool {
		return b.do("POST", "/api/v1/"+tok+"/telemetry", `{"t":1}`).Status == http.StatusTooManyRequests
	})
	// Node a has its own bucket for the device.
	a.must(200, "POST", "/api/v1/"+tok+"/telemetry", `{"t":2}`)
	limited(t, a.do("POST", "/api/v1/"+tok+"/telemetry", `{"t":3}`), "Too many requests for current device!")
}
