package apitest

import (
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-iot/sluice/config"
)

// claimPath is the customer claim path of a device name.
func claimPath(name string) string { return "/api/customer/device/" + url.PathEscape(name) + "/claim" }

// customerUser logs in as a user of a new customer created by the tenant admin
// and returns its X-Authorization header and the customer id.
func (n *testNode) customerUser(adminAuth, title string) (auth, customerID string) {
	n.t.Helper()
	var c struct{ ID entityID }
	n.must(200, "POST", "/api/customer", `{"title":"`+title+`"}`, adminAuth).JSON(n.t, &c)
	email := strings.ToLower(strings.ReplaceAll(title, " ", "")) + "@example.com"
	var u struct{ ID entityID }
	n.must(200, "POST", "/api/user?sendActivationMail=false",
		`{"email":"`+email+`","authority":"CUSTOMER_USER","customerId":{"entityType":"CUSTOMER","id":"`+c.ID.ID+`"}}`,
		adminAuth).JSON(n.t, &u)
	link := string(n.must(200, "GET", "/api/user/"+u.ID.ID+"/activationLink", "", adminAuth).Body)
	_, token, ok := strings.Cut(link, "activateToken=")
	if !ok {
		n.t.Fatalf("activation link %q", link)
	}
	n.must(200, "POST", "/api/noauth/activate", `{"activateToken":"`+token+`","password":"password1"}`)
	return n.login(email, "password1"), c.ID.ID
}

// demoCustomer logs in as the demo customer user and returns its header and customer id.
func (n *testNode) demoCustomer() (auth, customerID string) {
	n.t.Helper()
	auth = n.login("customer@thingsboard.org", "customer")
	var u struct{ CustomerID entityID }
	n.must(200, "GET", "/api/auth/user", "", auth).JSON(n.t, &u)
	return auth, u.CustomerID.ID
}

// claim claims a device as auth and checks the answer: "SUCCESS" (200 with the
// device, which must then belong to customerID), or the 400 JSON string
// "FAILURE" / "CLAIMED".
func (n *testNode) claim(auth, name, body, want, customerID string) {
	n.t.Helper()
	r := n.do("POST", claimPath(name), body, auth)
	if want != "SUCCESS" {
		if r.Status != 400 || string(r.Body) != `"`+want+`"` || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
			n.t.Fatalf("claim %s: %d %s (%s), want 400 %q", name, r.Status, r.Body, r.Header.Get("Content-Type"), want)
		}
		return
	}
	var res struct {
		Device struct {
			Name       string
			CustomerID entityID
		}
		Response string
	}
	if r.Status != 200 {
		n.t.Fatalf("claim %s: %d %s, want 200", name, r.Status, r.Body)
	}
	r.JSON(n.t, &res)
	if res.Response != "SUCCESS" || res.Device.Name != name || res.Device.CustomerID.ID != customerID {
		n.t.Fatalf("claim %s: %s", name, r.Body)
	}
}

// serverKeys lists the device's server attribute keys, without those of its
// activity ("active" is always there, "lastActivityTime" a few seconds after a
// device request).
func (n *testNode) serverKeys(auth, id string) string {
	n.t.Helper()
	var keys []string
	if err := json.Unmarshal(n.must(200, "GET", "/api/plugins/telemetry/DEVICE/"+id+"/keys/attributes/SERVER_SCOPE", "", auth).Body, &keys); err != nil {
		n.t.Fatal(err)
	}
	keys = slices.DeleteFunc(keys, func(k string) bool { return k == "active" || k == "lastActivityTime" })
	out, _ := json.Marshal(append([]string{}, keys...))
	return string(out)
}

// TestClaimOutcomes drives every outcome of both claim requests and of the
// reclaim over HTTP on the embedded default.
func TestClaimOutcomes(t *testing.T) {
	n := startNode(t, nil)
	admin := n.tenantAuth()
	custA, idA := n.demoCustomer()
	custB, idB := n.customerUser(admin, "Customer B")
	const name = "claim me/1" // a space and a slash: the path segment is percent-encoded
	id, token := n.createDevice(admin, name)
	deviceClaim := "/api/v1/" + token + "/claim"

	// Nothing to claim yet; unknown names; roles.
	n.claim(custA, name, `{}`, "FAILURE", "")
	if msg := errorBody(t, n.do("POST", claimPath("no such device"), `{}`, custA), 404); msg != "Requested item wasn't found!" {
		t.Fatalf("unknown device: %s", msg)
	}
	errorBody(t, n.do("POST", claimPath(name), `{}`, admin), 403)
	errorBody(t, n.do("POST", claimPath(name), `{}`), 401)
	errorBody(t, n.do("POST", claimPath(name), `{"secretKey":`, custA), 400)
	errorBody(t, n.do("POST", "/api/v1/not-a-token/claim", `{}`), 401)

	// Bad device bodies are 400 and record nothing.
	errorBody(t, n.do("POST", deviceClaim, `{"secretKey":`), 400)
	errorBody(t, n.do("POST", deviceClaim, `[]`), 400)
	errorBody(t, n.do("POST", deviceClaim, `{"durationMs":"soon"}`), 400)

	// The first claim stands while valid: the second does not change its secret.
	n.must(200, "POST", deviceClaim, `{"secretKey":"abc","durationMs":60000}`)
	if r := n.must(200, "POST", deviceClaim, `{"secretKey":"other"}`); len(r.Body) != 0 {
		t.Fatalf("device claim answered a body: %s", r.Body)
	}
	n.claim(custA, name, `{"secretKey":"abc"}`, "SUCCESS", idA)

	// The customer's users see the claimed device; others do not.
	n.must(200, "GET", "/api/device/"+id, "", custA)
	if b := string(n.must(200, "GET", "/api/customer/"+idA+"/devices?pageSize=100&page=0", "", custA).Body); !strings.Contains(b, id) {
		t.Fatalf("customer devices lack the claimed one: %s", b)
	}
	errorBody(t, n.do("GET", "/api/device/"+id, "", custB), 403)

	// Claimed: the customer side says CLAIMED, the device side 400 with the reason.
	n.claim(custB, name, `{"secretKey":"abc"}`, "CLAIMED", "")
	n.claim(custA, name, `{}`, "CLAIMED", "")
	if msg := errorBody(t, n.do("POST", deviceClaim, ``), 400); !strings.Contains(msg, "claimed") {
		t.Fatalf("device claim of a claimed device: %s", msg)
	}

	// Reclaim: only the owning customer's users or the tenant admin.
	errorBody(t, n.do("DELETE", claimPath(name), "", custB), 403)
	errorBody(t, n.do("DELETE", claimPath("no such device"), "", admin), 404)
	if r := n.must(200, "DELETE", claimPath(name), "", custA); len(r.Body) != 0 {
		t.Fatalf("reclaim answered a body: %s", r.Body)
	}
	errorBody(t, n.do("GET", "/api/device/"+id, "", custA), 403)

	// A wrong secret fails and ends the window: the right one then fails too.
	n.must(200, "POST", deviceClaim, `{"secretKey":"abc"}`)
	n.claim(custB, name, `{"secretKey":"nope"}`, "FAILURE", "")
	n.claim(custB, name, `{"secretKey":"abc"}`, "FAILURE", "")

	// No body on either side: both secrets empty. A null body is {}.
	n.must(200, "POST", deviceClaim, ``)
	n.claim(custB, name, `null`, "SUCCESS", idB)
	n.must(200, "DELETE", claimPath(name), "", admin)
	n.must(200, "POST", deviceClaim, `null`)
	n.claim(custB, name, ``, "SUCCESS", idB)
	n.must(200, "DELETE", claimPath(name), "", admin)
	n.must(200, "DELETE", claimPath(name), "", admin) // unassigned already: still 200
}

// TestClaimServerSide: the tenant sets claimingData; an expired one fails, a
// valid one claims and is removed with claimingAllowed.
func TestClaimServerSide(t *testing.T) {
	n := startNode(t, nil)
	admin := n.tenantAuth()
	cust, custID := n.demoCustomer()
	id, _ := n.createDevice(admin, "server-side")
	attrs := "/api/plugins/telemetry/DEVICE/" + id + "/SERVER_SCOPE"

	n.must(200, "POST", attrs, `{"claimingData":{"secretKey":"k","expirationTime":1000},"keep":1}`, admin)
	n.claim(cust, "server-side", `{"secretKey":"k"}`, "FAILURE", "") // expired in 1970
	n.must(200, "POST", attrs, `{"claimingData":{"secretKey":"k","expirationTime":99999999999999},"claimingAllowed":true}`, admin)
	n.claim(cust, "server-side", `{"secretKey":"x"}`, "FAILURE", "")
	n.claim(cust, "server-side", `{"secretKey":"k"}`, "SUCCESS", custID)
	if keys := n.serverKeys(admin, id); keys != `["keep"]` {
		t.Fatalf("server attributes after the claim: %s", keys)
	}
}

// TestClaimNotAllowedByDefault: with SLUICE_CLAIM_ALLOW_BY_DEFAULT=false only a
// device with claimingAllowed=true may open a window, and a reclaim allows it again.
func TestClaimNotAllowedByDefault(t *testing.T) {
	n := startNode(t, func(c *config.Config) { c.Device.ClaimAllowByDefault = false })
	admin := n.tenantAuth()
	custA, idA := n.demoCustomer()
	custB, idB := n.customerUser(admin, "Customer B")
	id, token := n.createDevice(admin, "guarded")
	deviceClaim := "/api/v1/" + token + "/claim"

	if msg := errorBody(t, n.do("POST", deviceClaim, `{"secretKey":"k"}`), 400); !strings.Contains(msg, "claimingAllowed") {
		t.Fatalf("claim without claimingAllowed: %s", msg)
	}
	n.claim(custA, "guarded", `{"secretKey":"k"}`, "FAILURE", "")

	n.must(200, "POST", "/api/plugins/telemetry/DEVICE/"+id+"/SERVER_SCOPE", `{"claimingAllowed":true}`, admin)
	n.must(200, "POST", deviceClaim, `{"secretKey":"k"}`)
	n.claim(custA, "guarded", `{"secretKey":"k"}`, "SUCCESS", idA)
	if keys := n.serverKeys(admin, id); keys != `[]` {
		t.Fatalf("server attributes after the claim: %s", keys)
	}

	n.must(200, "DELETE", claimPath("guarded"), "", custA)
	if keys := n.serverKeys(admin, id); keys != `["claimingAllowed"]` {
		t.Fatalf("server attributes after the reclaim: %s", keys)
	}
	n.must(200, "POST", deviceClaim, `{"secretKey":"k2"}`)
	n.claim(custB, "guarded", `{"secretKey":"k2"}`, "SUCCESS", idB)
}

// TestClaimAcrossNodes: the device opens its window through node A and the
// customer claims through node B (Redis + ClickHouse); windows are shared, so
// a second device request through B does not replace A's.
func TestClaimAcrossNodes(t *testing.T) {
	d := newDeployment(t)
	a := d.node(t, nil)
	b := d.node(t, nil)
	admin := a.tenantAuth()
	custA, idA := a.demoCustomer()
	custB, idB := b.customerUser(admin, "Customer B")
	id, token := a.createDevice(admin, "roaming device")

	a.must(200, "POST", "/api/v1/"+token+"/claim", `{"secretKey":"one"}`)
	b.must(200, "POST", "/api/v1/"+token+"/claim", `{"secretKey":"two"}`)
	b.claim(custA, "roaming device", `{"secretKey":"one"}`, "SUCCESS", idA)
	a.claim(custB, "roaming device", `{"secretKey":"one"}`, "CLAIMED", "")
	for _, n := range []*testNode{a, b} {
		n.must(200, "GET", "/api/device/"+id, "", custA)
		errorBody(t, n.do("GET", "/api/device/"+id, "", custB), 403)
	}
	// Claimed through B, so A refuses a new window at once, whatever it cached.
	errorBody(t, a.do("POST", "/api/v1/"+token+"/claim", ``), 400)

	b.must(200, "DELETE", claimPath("roaming device"), "", admin)
	a.must(200, "POST", "/api/v1/"+token+"/claim", `{"secretKey":"three"}`)
	b.claim(custB, "roaming device", `{"secretKey":"three"}`, "SUCCESS", idB)
}
