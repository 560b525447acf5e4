package httpapi

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/engine"
)

// code returns the errorCode of a JSON error body.
func (n *testNode) code(body []byte) int {
	n.t.Helper()
	var e apiError
	n.decode(body, &e)
	return e.ErrorCode
}

func TestPasswordChangeOutdatesTokens(t *testing.T) {
	n := startTestNode(t)
	old := n.pair(n.expect("POST", "/api/auth/login", "", map[string]string{"username": engine.DemoTenantAdminEmail, "password": "tenant"}, 200, ""))
	auth := "Bearer " + old.Token
	cp := func(cur, next string, status int, msg string) []byte {
		t.Helper()
		return n.expect("POST", "/api/auth/changePassword", auth, map[string]string{"currentPassword": cur, "newPassword": next}, status, msg)
	}
	cp("wrong", "newpass1", 400, "Current password doesn't match!")
	cp("tenant", "tenant", 400, "New password should be different from existing!")
	cp("tenant", "abc", 400, "Password must be 6 or more characters in length.")
	n.expect("POST", "/api/auth/changePassword", "", map[string]string{"currentPassword": "tenant", "newPassword": "x"}, 401, "")
	n.expect("GET", "/api/auth/user", auth, nil, 200, "")

	next := n.pair(cp("tenant", "newpass1", 200, ""))
	body := n.expect("GET", "/api/auth/user", auth, nil, 401, "Token has expired")
	if c := n.code(body); c != 11 {
		t.Errorf("outdated access token: code %d", c)
	}
	body = n.expect("POST", "/api/auth/token", "", map[string]string{"refreshToken": old.RefreshToken}, 401, "Token is outdated")
	if c := n.code(body); c != 10 {
		t.Errorf("outdated refresh token: code %d", c)
	}
	n.expect("GET", "/api/auth/user", "Bearer "+next.Token, nil, 200, "")
	n.pair(n.expect("POST", "/api/auth/token", "", map[string]string{"refreshToken": next.RefreshToken}, 200, ""))
	n.expect("POST", "/api/auth/login", "", map[string]string{"username": engine.DemoTenantAdminEmail, "password": "tenant"}, 401, "Invalid username or password")
	fresh := n.bearer(engine.DemoTenantAdminEmail, "newpass1")
	n.expect("GET", "/api/auth/user", fresh, nil, 200, "")
	// Other users keep their sessions.
	n.expect("GET", "/api/auth/user", n.customer(), nil, 200, "")
}

func TestAPIKeysOverHTTP(t *testing.T) {
	n := startTestNode(t)
	ta, cu := n.tenant(), n.customer()
	var me engine.User
	n.decode(n.expect("GET", "/api/auth/user", ta, nil, 200, ""), &me)

	raw := n.expect("POST", "/api/apiKey", ta, map[string]any{"userId": me.ID, "description": "ci", "expirationTime": 0, "enabled": true}, 200, "")
	var k engine.APIKey
	n.decode(raw, &k)
	if k.Value == nil || len(*k.Value) != 89 || !strings.HasPrefix(*k.Value, "tb_") || strings.ContainsAny((*k.Value)[3:], "+/=") {
		t.Fatalf("created key: %s", raw)
	}
	for _, f := range []string{`"id":{"entityType":"API_KEY"`, `"createdTime":`, `"tenantId":`, `"userId":`, `"expirationTime":0`, `"description":"ci"`, `"enabled":true`, `"expired":false`} {
		if !strings.Contains(string(raw), f) {
			t.Errorf("key lacks %s: %s", f, raw)
		}
	}
	key := "ApiKey " + *k.Value
	var u engine.User
	n.decode(n.expect("GET", "/api/auth/user", key, nil, 200, ""), &u)
	if u.ID != me.ID {
		t.Fatalf("api key user: %+v", u)
	}
	// The key works as its user does: it may create a device, and a customer's
	// key may not. A key created without "enabled" is enabled.
	n.expect("POST", "/api/device", key, map[string]string{"name": "by-key"}, 200, "")
	var ck engine.APIKey
	n.decode(n.expect("POST", "/api/apiKey", cu, map[string]any{"description": "mine"}, 200, ""), &ck)
	n.expect("POST", "/api/device", "ApiKey "+*ck.Value, map[string]string{"name": "nope"}, 403, "")
	n.expect("GET", "/api/device/"+n.Demo.CustomerDeviceID.String(), "ApiKey "+*ck.Value, nil, 200, "")

	// The list never shows values.
	list := n.expect("GET", "/api/apiKeys/"+me.ID.ID.String()+"?pageSize=10&page=0&textSearch=c&sortProperty=description&sortOrder=DESC", ta, nil, 200, "")
	if strings.Contains(string(list), *k.Value) || strings.Contains(string(list), `"value"`) {
		t.Fatalf("list shows the value: %s", list)
	}
	var page engine.PageData[engine.APIKeyInfo]
	n.decode(list, &page)
	if page.TotalElements != 1 || page.Data[0].ID != k.ID {
		t.Fatalf("list: %s", list)
	}
	n.expect("GET", "/api/apiKeys/"+me.ID.ID.String()+"?pageSize=10&page=0&sortProperty=value", ta, nil, 400, "")
	n.expect("GET", "/api/apiKeys/"+uuid.NewString()+"?pageSize=10&page=0", ta, nil, 404, "")

	// Update by re-POST: value null, expirationTime and userId fixed.
	upd := k.APIKeyInfo
	upd.Description = "ci-2"
	out := n.expect("POST", "/api/apiKey", ta, upd, 200, "")
	if !strings.Contains(string(out), `"value":null`) || !strings.Contains(string(out), `"description":"ci-2"`) {
		t.Fatalf("update: %s", out)
	}
	bad := upd
	bad.ExpirationTime = time.Now().Add(time.Hour).UnixMilli()
	n.expect("POST", "/api/apiKey", ta, bad, 400, "API key expiration time can't be changed")
	bad = upd
	bad.UserID = n.userID(cu)
	n.expect("POST", "/api/apiKey", ta, bad, 400, "API key user can't be changed")
	n.expect("POST", "/api/apiKey", ta, map[string]any{"description": " ", "enabled": true}, 400, "")
	n.expect("POST", "/api/apiKey", ta, "{", 400, "")

	id := "/api/apiKey/" + k.ID.ID.String()
	var info engine.APIKeyInfo
	n.decode(n.expect("PUT", id+"/description", ta, "deploy bot", 200, ""), &info)
	if info.Description != "deploy bot" {
		t.Fatalf("description: %+v", info)
	}
	n.decode(n.expect("PUT", id+"/description", ta, `"quoted"`, 200, ""), &info)
	if info.Description != "quoted" {
		t.Fatalf("description: %+v", info)
	}
	n.decode(n.expect("PUT", id+"/enabled/false", ta, nil, 200, ""), &info)
	if info.Enabled {
		t.Fatalf("enabled: %+v", info)
	}
	body := n.expect("GET", "/api/auth/user", key, nil, 401, "User account is not active")
	if c := n.code(body); c != 10 {
		t.Errorf("disabled key code %d", c)
	}
	n.expect("PUT", id+"/enabled/maybe", ta, nil, 400, "")
	n.expect("PUT", id+"/enabled/true", ta, nil, 200, "")
	n.expect("GET", "/api/auth/user", key, nil, 200, "")
	n.expect("PUT", id+"/enabled/false", cu, nil, 403, "")

	// An expired key.
	var ek engine.APIKey
	n.decode(n.expect("POST", "/api/apiKey", ta, map[string]any{"description": "old", "enabled": true,
		"expirationTime": time.Now().Add(-time.Minute).UnixMilli()}, 200, ""), &ek)
	if !ek.Expired {
		t.Errorf("expired flag: %+v", ek.APIKeyInfo)
	}
	n.expect("GET", "/api/auth/user", "ApiKey "+*ek.Value, nil, 401, "API key is expired")

	// Delete.
	n.expect("DELETE", id, cu, nil, 403, "")
	n.expect("DELETE", id, ta, nil, 200, "")
	n.expect("DELETE", id, ta, nil, 404, "")
	n.expect("DELETE", "/api/apiKey/nope", ta, nil, 400, "")
	body = n.expect("GET", "/api/auth/user", key, nil, 401, "Invalid username or password")
	if c := n.code(body); c != 10 {
		t.Errorf("deleted key code %d", c)
	}
	n.expect("GET", "/api/auth/user", "ApiKey tb_unknown", nil, 401, "Invalid username or password")
}

// userID returns the id of the user behind auth.
func (n *testNode) userID(auth string) engine.EntityID {
	n.t.Helper()
	var u engine.User
	n.decode(n.expect("GET", "/api/auth/user", auth, nil, 200, ""), &u)
	return u.ID
}

func TestHeaderRules(t *testing.T) {
	n := startTestNode(t)
	jwt := n.tenant()
	var k engine.APIKey
	n.decode(n.expect("POST", "/api/apiKey", jwt, map[string]any{"description": "h", "enabled": true}, 200, ""), &k)
	key := *k.Value
	raw := strings.TrimPrefix(jwt, "Bearer ")

	f := func(xauth, auth string, status int, msg string) {
		t.Helper()
		req, _ := http.NewRequest("GET", n.URL+"/api/auth/user", nil)
		if xauth != "" {
			req.Header.Set("X-Authorization", xauth)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e apiError
		json.NewDecoder(resp.Body).Decode(&e)
		if resp.StatusCode != status || (msg != "" && e.Message != msg) {
			t.Errorf("X-Authorization %.12q, Authorization %.12q: %d %q, want %d %q", xauth, auth, resp.StatusCode, e.Message, status, msg)
		}
	}
	f("ApiKey "+key, "", 200, "")
	f("", "ApiKey "+key, 200, "")
	f(" ", "ApiKey "+key, 200, "")
	f("ApiKey "+key, "Bearer junk", 200, "")
	f("Bearer "+raw, "ApiKey junk", 200, "")
	f("ApiKey tb_junk", "Bearer "+raw, 401, "Invalid username or password") // X-Authorization wins
	f("Bearer junk", "ApiKey "+key, 401, "Invalid username or password")
	for _, bad := range []string{"apikey " + key, "APIKEY " + key, "Apikey " + key, "ApiKey" + key, key,
		"bearer " + raw, "BEARER " + raw, "Bearer" + raw, "Basic dXNlcjpwdw==", "Token " + raw} {
		f(bad, "", 401, "Authentication failed")
	}
	f("", "", 401, "Authentication failed")
}

func TestActivationOverHTTP(t *testing.T) {
	n := startTestNode(t)
	ta, cu := n.tenant(), n.customer()
	_, other := n.otherTenant("B")
	var u engine.User
	n.decode(n.expect("POST", "/api/user?sendActivationMail=false", ta, map[string]any{
		"email": "new@example.com", "authority": "CUSTOMER_USER", "customerId": map[string]string{"entityType": "CUSTOMER", "id": n.Demo.DemoCustomerID.String()},
	}, 200, ""), &u)
	linkPath := "/api/user/" + u.ID.ID.String() + "/activationLink"
	n.expect("GET", linkPath, cu, nil, 403, "")
	n.expect("GET", linkPath, other, nil, 403, "")
	n.expect("GET", "/api/user/"+uuid.NewString()+"/activationLink", ta, nil, 404, "")
	n.expect("POST", "/api/auth/login", "", map[string]string{"username": "new@example.com", "password": "password1"}, 401, "")

	link := string(n.expect("GET", linkPath, ta, nil, 200, ""))
	if !strings.HasPrefix(link, n.URL+"/api/noauth/activate?activateToken=") {
		t.Fatalf("link %q", link)
	}
	token := strings.TrimPrefix(link, n.URL+"/api/noauth/activate?activateToken=")
	act := func(tok, pw string, status int, msg string) []byte {
		t.Helper()
		return n.expect("POST", "/api/noauth/activate", "", map[string]string{"activateToken": tok, "password": pw}, status, msg)
	}
	act("nope", "password1", 400, "")
	act(token, "short", 400, "Password must be 6 or more characters in length.")
	p := n.pair(act(token, "password1", 200, ""))
	act(token, "password2", 400, "") // single use
	var me engine.User
	n.decode(n.expect("GET", "/api/auth/user", "Bearer "+p.Token, nil, 200, ""), &me)
	if me.ID != u.ID {
		t.Fatalf("activated user: %+v", me)
	}
	n.bearer("new@example.com", "password1")
	n.expect("GET", linkPath, ta, nil, 400, "User is already activated!")
	n.expect("POST", "/api/noauth/activate", "", "{", 400, "")
}

func TestLoginLockoutOverHTTP(t *testing.T) {
	n := startTestNode(t, func(c *engine.Config) { c.LoginMaxFailures = 3; c.LoginMaxAddressFailures = 100 })
	login := func(user, pw string, status int, msg string) []byte {
		t.Helper()
		return n.expect("POST", "/api/auth/login", "", map[string]string{"username": user, "password": pw}, status, msg)
	}
	for range 3 {
		login(engine.DemoTenantAdminEmail, "wrong", 401, "Invalid username or password")
	}
	body := login(engine.DemoTenantAdminEmail, "tenant", 401, "User account is locked due to security policy")
	if c := n.code(body); c != 10 {
		t.Errorf("locked code %d", c)
	}
	login(engine.DemoCustomerUserEmail, "customer", 200, "")

	// Per client address: failures over many names lock the address.
	n2 := startTestNode(t, func(c *engine.Config) { c.LoginMaxFailures = 100; c.LoginMaxAddressFailures = 4 })
	for i := range 4 {
		n2.expect("POST", "/api/auth/login", "", map[string]string{"username": "u" + string(rune('a'+i)) + "@example.com", "password": "x"}, 401, "Invalid username or password")
	}
	n2.expect("POST", "/api/auth/login", "", map[string]string{"username": engine.DemoTenantAdminEmail, "password": "tenant"}, 401, "User account is locked due to security policy")
}

func TestAccountRoutes(t *testing.T) {
	n := startTestNode(t)
	ta, cu, sys := n.tenant(), n.customer(), n.sysadmin()
	tenantB, other := n.otherTenant("B")
	custA := n.Demo.DemoCustomerID.String()

	// Users: read, lists, delete.
	cuID := n.userID(cu)
	n.expect("GET", "/api/user/"+cuID.ID.String(), ta, nil, 200, "")
	n.expect("GET", "/api/user/"+cuID.ID.String(), cu, nil, 200, "")
	n.expect("GET", "/api/user/"+n.userID(ta).ID.String(), cu, nil, 403, "")
	n.expect("GET", "/api/user/"+cuID.ID.String(), sys, nil, 403, "")
	n.expect("GET", "/api/user/"+uuid.NewString(), ta, nil, 404, "")
	var users engine.PageData[engine.User]
	n.decode(n.expect("GET", "/api/customer/"+custA+"/users?pageSize=10&page=0", ta, nil, 200, ""), &users)
	if users.TotalElements != 1 || users.Data[0].Email != engine.DemoCustomerUserEmail {
		t.Fatalf("customer users: %+v", users)
	}
	n.expect("GET", "/api/customer/"+custA+"/users?pageSize=10&page=0", cu, nil, 403, "")
	n.decode(n.expect("GET", "/api/tenant/"+tenantB.ID.ID.String()+"/users?pageSize=10&page=0&sortProperty=email", sys, nil, 200, ""), &users)
	if users.TotalElements != 1 || users.Data[0].Email != "b@example.com" {
		t.Fatalf("tenant admins: %+v", users)
	}
	n.expect("GET", "/api/tenant/"+tenantB.ID.ID.String()+"/users?pageSize=10&page=0", other, nil, 200, "")
	n.expect("GET", "/api/tenant/"+uuid.NewString()+"/users?pageSize=10&page=0", sys, nil, 404, "")

	// Devices: assign, list, unassign.
	demo := n.Demo.DemoDeviceID.String()
	n.expect("GET", "/api/device/"+demo, cu, nil, 403, "")
	var d engine.Device
	n.decode(n.expect("POST", "/api/customer/"+custA+"/device/"+demo, ta, nil, 200, ""), &d)
	if d.CustomerID.ID != n.Demo.DemoCustomerID {
		t.Fatalf("assigned: %+v", d)
	}
	n.expect("GET", "/api/device/"+demo, cu, nil, 200, "")
	var devs engine.PageData[engine.Device]
	n.decode(n.expect("GET", "/api/customer/"+custA+"/devices?pageSize=10&page=0&sortProperty=name", cu, nil, 200, ""), &devs)
	if devs.TotalElements != 2 {
		t.Fatalf("customer devices: %+v", devs)
	}
	n.expect("POST", "/api/customer/"+custA+"/device/"+demo, cu, nil, 403, "")
	n.expect("POST", "/api/customer/"+uuid.NewString()+"/device/"+demo, ta, nil, 404, "")
	n.decode(n.expect("DELETE", "/api/customer/device/"+demo, ta, nil, 200, ""), &d)
	if d.CustomerID.ID != engine.NullUUID {
		t.Fatalf("unassigned: %+v", d)
	}
	n.expect("DELETE", "/api/customer/device/"+demo, ta, nil, 400, "Device isn't assigned to any customer!")
	n.expect("GET", "/api/device/"+demo, cu, nil, 403, "")

	// Deleting a user ends its sessions.
	n.expect("DELETE", "/api/user/"+cuID.ID.String(), cu, nil, 403, "")
	n.expect("DELETE", "/api/user/"+cuID.ID.String(), ta, nil, 200, "")
	n.expect("DELETE", "/api/user/"+cuID.ID.String(), ta, nil, 404, "")
	n.expect("GET", "/api/auth/user", cu, nil, 401, "Token has expired")
	n.expect("DELETE", "/api/user/"+n.userID(sys).ID.String(), sys, nil, 403, "")

	// Customers: delete unassigns their devices.
	n.expect("DELETE", "/api/customer/"+custA, other, nil, 403, "")
	n.expect("DELETE", "/api/customer/"+custA, ta, nil, 200, "")
	n.expect("GET", "/api/customer/"+custA, ta, nil, 404, "")
	n.decode(n.expect("GET", "/api/device/"+n.Demo.CustomerDeviceID.String(), ta, nil, 200, ""), &d)
	if d.CustomerID.ID != engine.NullUUID {
		t.Fatalf("device of a deleted customer: %+v", d)
	}
}

func TestDeleteTenantOverHTTP(t *testing.T) {
	n := startTestNode(t)
	sys := n.sysadmin()
	tenantB, other := n.otherTenant("B")
	var d engine.Device
	n.decode(n.expect("POST", "/api/device?accessToken=B_TOKEN", other, map[string]string{"name": "bd"}, 200, ""), &d)
	n.expect("POST", "/api/v1/B_TOKEN/telemetry", "", `{"t":1}`, 200, "")
	var k engine.APIKey
	n.decode(n.expect("POST", "/api/apiKey", other, map[string]any{"description": "k", "enabled": true}, 200, ""), &k)
	path := "/api/tenant/" + tenantB.ID.ID.String()

	n.expect("DELETE", path, other, nil, 403, "")
	n.expect("DELETE", path, n.tenant(), nil, 403, "")
	n.expect("DELETE", path, sys, nil, 200, "")
	n.expect("DELETE", path, sys, nil, 404, "")
	n.expect("GET", path, sys, nil, 404, "")
	n.expect("POST", "/api/v1/B_TOKEN/telemetry", "", `{"t":2}`, 401, "")
	n.expect("GET", "/api/auth/user", other, nil, 401, "")
	n.expect("GET", "/api/auth/user", "ApiKey "+*k.Value, nil, 401, "Invalid username or password")
	n.expect("POST", "/api/auth/login", "", map[string]string{"username": "b@example.com", "password": "password1"}, 401, "Invalid username or password")
	if pts, err := n.Eng.LatestTelemetry(t.Context(), d.ID.ID, nil); err != nil || len(pts) != 0 {
		t.Fatalf("telemetry left: %v %v", pts, err)
	}
}

// TestFieldLengthsOverHTTP: a user's names are bounded (they go into every
// access token: a 5 KB name made tokens too large for a request header), and
// so is an API key's description; past the bound it is 400 code 31.
func TestFieldLengthsOverHTTP(t *testing.T) {
	n := startTestNode(t)
	auth := n.tenant()
	long := strings.Repeat("x", 5000)
	body := n.expect("POST", "/api/user?sendActivationMail=false", auth,
		map[string]any{"email": "long@example.com", "authority": engine.TenantAdmin, "firstName": long},
		400, "Validation error: first name length must be equal or less than 255")
	if c := n.code(body); c != int(engine.CodeBadRequestParams) {
		t.Fatalf("code %d", c)
	}
	body = n.expect("POST", "/api/apiKey", auth, map[string]any{"description": long},
		400, "Validation error: description length must be equal or less than 255")
	if c := n.code(body); c != int(engine.CodeBadRequestParams) {
		t.Fatalf("code %d", c)
	}
}
