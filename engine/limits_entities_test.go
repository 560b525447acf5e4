package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"golang.org/x/crypto/bcrypt"

	"github.com/sluice-iot/sluice/storage"
)

// entityLimited gives the demo tenant a profile with conf (a new one, or the
// one a previous call gave it, changed) and returns the profile.
func entityLimited(t *testing.T, te *testEngine, prev *TenantProfile, conf string) *TenantProfile {
	t.Helper()
	ctx := context.Background()
	sys := te.sysadmin(t)
	in := &TenantProfile{Name: "entity-limited", ProfileData: TenantProfileData{Configuration: json.RawMessage(conf)}}
	if prev != nil {
		in.ID = prev.ID
	}
	tp, err := te.SaveTenantProfile(ctx, sys, in)
	if err != nil {
		t.Fatal(err)
	}
	if prev == nil {
		tn, err := te.GetTenant(ctx, sys, te.demo.DemoTenantID)
		if err != nil {
			t.Fatal(err)
		}
		tn.TenantProfileID = &tp.ID
		if _, err := te.SaveTenant(ctx, sys, tn); err != nil {
			t.Fatal(err)
		}
	}
	return tp
}

// wantEntitiesLimit fails unless err is ThingsBoard's "<Type>s limit reached".
func wantEntitiesLimit(t *testing.T, err error, entityType, msg string, limit int64) {
	t.Helper()
	var le *EntitiesLimitError
	if !errors.As(err, &le) || le.EntityType != entityType || le.Limit != limit || le.Err.Msg != msg || err.Error() != msg {
		t.Fatalf("want %s limit %d %q, got %#v", entityType, limit, msg, err)
	}
	wantCode(t, err, CodeEntitiesLimit) // ThingsBoard's ENTITIES_LIMIT_EXCEEDED (403)
}

func (te *testEngine) count(t *testing.T, kind string, owner uuid.UUID) int {
	t.Helper()
	n, err := te.store.Count(context.Background(), kind, owner)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestLimitDevices: maxDevices refuses the create past it over REST (403
// "Devices limit reached") and provisioning (FAILURE), writes nothing then,
// and a deletion frees a place; 0 or less is unlimited, updates are not
// creates, and other tenants are not concerned.
func TestLimitDevices(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	tenant := admin.TenantID
	have := te.count(t, kindDevice, tenant) // the demo devices
	limit := int64(have + 2)
	tp := entityLimited(t, te, nil, `{"type":"DEFAULT","maxDevices":`+itoa64(limit)+`}`)
	te.provisionProfile(t, admin, "prov", ProvisionAllowCreate, "limit-key", "limit-secret")

	var made []*Device
	for _, name := range []string{"l1", "l2"} {
		d, err := te.SaveDevice(ctx, admin, &Device{Name: name}, "")
		wantCode(t, err, 0)
		made = append(made, d)
	}
	_, err := te.SaveDevice(ctx, admin, &Device{Name: "l3", Type: "new-type"}, "tok-l3")
	wantEntitiesLimit(t, err, EntityDevice, "Devices limit reached", limit)
	if _, err := lookupRecord[DeviceProfile](ctx, te.Engine, kindProfile, profileNameKey(tenant, "new-type")); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("a refused create made its profile: %v", err)
	}
	if _, err := lookupRecord[DeviceCredentials](ctx, te.Engine, kindCredentials, tokenKey("tok-l3")); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("a refused create stored its token: %v", err)
	}
	if n := te.count(t, kindDevice, tenant); int64(n) != limit {
		t.Fatalf("%d devices, want %d", n, limit)
	}
	// Every way to create one is refused; an update is not a create.
	_, err = te.SaveDeviceWithCredentials(ctx, admin, &Device{Name: "l3"}, &DeviceCredentials{CredentialsType: CredentialsAccessToken, CredentialsID: "tok-l3b"}, NameConflict{})
	wantEntitiesLimit(t, err, EntityDevice, "Devices limit reached", limit)
	made[0].Label = "changed"
	_, err = te.SaveDevice(ctx, admin, made[0], "")
	wantCode(t, err, 0)
	name := "prov-1"
	if res := te.provision(t, ProvisionRequest{DeviceName: &name, ProvisionDeviceKey: "limit-key", ProvisionDeviceSecret: "limit-secret"}); res.Status != ProvisionFailure || res.ErrorMsg != provisionFailureMsg {
		t.Fatalf("provision past the limit: %+v", res)
	}
	if _, err := lookupRecord[Device](ctx, te.Engine, kindDevice, deviceNameKey(tenant, name)); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("a refused provision made its device: %v", err)
	}

	// Another tenant has the default profile: unlimited.
	other := te.newTenant(t, "other", "other@example.com")
	for _, n := range []string{"o1", "o2", "o3"} {
		_, err := te.SaveDevice(ctx, other, &Device{Name: n}, "")
		wantCode(t, err, 0)
	}

	// A deletion frees a place, for provisioning too.
	wantCode(t, te.DeleteDevice(ctx, admin, made[1].ID.ID), 0)
	if res := te.provision(t, ProvisionRequest{DeviceName: &name, ProvisionDeviceKey: "limit-key", ProvisionDeviceSecret: "limit-secret"}); res.Status != ProvisionSuccess {
		t.Fatalf("provision after a deletion: %+v", res)
	}
	_, err = te.SaveDevice(ctx, admin, &Device{Name: "l4"}, "")
	wantEntitiesLimit(t, err, EntityDevice, "Devices limit reached", limit)

	// A lowered limit refuses creates and keeps what is there; 0 and a
	// negative limit are unlimited. A profile change applies at once.
	entityLimited(t, te, tp, `{"maxDevices":1}`)
	_, err = te.SaveDevice(ctx, admin, &Device{Name: "l4"}, "")
	wantEntitiesLimit(t, err, EntityDevice, "Devices limit reached", 1)
	if n := te.count(t, kindDevice, tenant); int64(n) != limit {
		t.Fatalf("%d devices after the limit was lowered, want %d", n, limit)
	}
	for i, conf := range []string{`{"maxDevices":0}`, `{"maxDevices":-5}`, `{"maxDevices":null}`, `{}`} {
		entityLimited(t, te, tp, conf)
		_, err = te.SaveDevice(ctx, admin, &Device{Name: "free-" + itoa64(int64(i))}, "")
		wantCode(t, err, 0)
	}
}

// TestLimitCustomersAndUsers: maxCustomers and maxUsers; every user of the
// tenant counts, tenant admins and customer users, whoever creates it, and
// system administrators are not limited.
func TestLimitCustomersAndUsers(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	sys := te.sysadmin(t)
	tenant := admin.TenantID
	customers := int64(te.count(t, kindCustomer, tenant) + 1)
	users := int64(te.count(t, kindUser, tenant) + 1) // the demo tenant admin and customer user
	entityLimited(t, te, nil, `{"maxCustomers":`+itoa64(customers)+`,"maxUsers":`+itoa64(users)+`}`)

	c, err := te.SaveCustomer(ctx, admin, &Customer{Title: "c1"})
	wantCode(t, err, 0)
	_, err = te.SaveCustomer(ctx, admin, &Customer{Title: "c2"})
	wantEntitiesLimit(t, err, EntityCustomer, "Customers limit reached", customers)
	c.Title = "c1 renamed"
	_, err = te.SaveCustomer(ctx, admin, c)
	wantCode(t, err, 0) // an update

	u, err := te.SaveUser(ctx, admin, &User{Email: "cu@example.com", Authority: CustomerUser, CustomerID: c.ID})
	wantCode(t, err, 0)
	_, err = te.SaveUser(ctx, admin, &User{Email: "ta@example.com", Authority: TenantAdmin})
	wantEntitiesLimit(t, err, EntityUser, "Users limit reached", users)
	_, err = te.SaveUser(ctx, sys, &User{Email: "ta@example.com", Authority: TenantAdmin, TenantID: newEntityID(EntityTenant, tenant)})
	wantEntitiesLimit(t, err, EntityUser, "Users limit reached", users)
	_, err = te.SaveUser(ctx, sys, &User{Email: "sys2@example.com", Authority: SysAdmin})
	wantCode(t, err, 0) // no tenant
	u.FirstName = "F"
	_, err = te.SaveUser(ctx, admin, u)
	wantCode(t, err, 0) // an update

	// Deleting the customer deletes its user: a place for each.
	wantCode(t, te.DeleteCustomer(ctx, admin, c.ID.ID), 0)
	_, err = te.SaveUser(ctx, admin, &User{Email: "ta@example.com", Authority: TenantAdmin})
	wantCode(t, err, 0)
	_, err = te.SaveCustomer(ctx, admin, &Customer{Title: "c2"})
	wantCode(t, err, 0)

	// Another tenant is not concerned.
	other := te.newTenant(t, "other", "other@example.com")
	for _, title := range []string{"x1", "x2", "x3"} {
		_, err := te.SaveCustomer(ctx, other, &Customer{Title: title})
		wantCode(t, err, 0)
	}
}

// chunkTally is a store that keeps the bytes of OTA chunks stored at once,
// and the most it ever held.
type chunkTally struct {
	storage.Backend
	mu         sync.Mutex
	size       map[uuid.UUID]int
	live, peak int
}

func (s *chunkTally) Put(ctx context.Context, r storage.Record) error {
	err := s.Backend.Put(ctx, r)
	if err == nil && r.Kind == kindOtaChunk {
		s.mu.Lock()
		s.live += len(r.Data) - s.size[r.ID]
		s.size[r.ID] = len(r.Data)
		s.peak = max(s.peak, s.live)
		s.mu.Unlock()
	}
	return err
}

func (s *chunkTally) Delete(ctx context.Context, kind string, id uuid.UUID) error {
	err := s.Backend.Delete(ctx, kind, id)
	if err == nil && kind == kindOtaChunk {
		s.mu.Lock()
		s.live -= s.size[id]
		delete(s.size, id)
		s.mu.Unlock()
	}
	return err
}

// TestLimitOtaBytes: maxOtaPackagesInBytes refuses an upload that would take
// the tenant's packages past it (400, ThingsBoard's text), having stored no
// byte past it and kept none; reaching it exactly passes; deleting a package
// frees its bytes; 0 is unlimited.
func TestLimitOtaBytes(t *testing.T) {
	tally := &chunkTally{Backend: openDB(t), size: map[uuid.UUID]int{}}
	e := New(tally, Config{JWTSigningKey: []byte("test-signing-key-0123456789abcdef"), BcryptCost: bcrypt.MinCost})
	t.Cleanup(func() { e.Close(context.Background()) })
	res, err := e.Bootstrap(context.Background(), true, "")
	if err != nil {
		t.Fatal(err)
	}
	te := &testEngine{Engine: e, demo: res}
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	const limit = otaChunkSize + otaChunkSize/2
	tp := entityLimited(t, te, nil, `{"maxOtaPackagesInBytes":`+itoa64(limit)+`}`)
	const msg = "Ota packages total size exceeds the maximum of 1 MB"
	upload := func(pkg *OtaPackageInfo, n int) error {
		_, err := te.SaveOtaPackageData(ctx, admin, pkg.ID.ID, OtaUpload{ChecksumAlgorithm: "sha256", FileName: "f.bin", Data: bytes.NewReader(make([]byte, n))})
		return err
	}
	refused := func(err error) {
		t.Helper()
		var ee *Error
		if !errors.As(err, &ee) || ee.Code != CodeBadRequestParams || ee.Msg != msg {
			t.Fatalf("want 400 %q, got %v", msg, err)
		}
	}

	first := te.newTestOta(t, admin, "first", "1")
	wantCode(t, upload(first, otaChunkSize), 0)
	second := te.newTestOta(t, admin, "second", "1")
	refused(upload(second, 2*otaChunkSize))
	if tally.peak > limit || tally.live != otaChunkSize {
		t.Fatalf("chunks: %d bytes at most, %d now; want at most %d, %d now", tally.peak, tally.live, limit, otaChunkSize)
	}
	refused(upload(second, otaChunkSize/2+1))
	if info, err := te.GetOtaPackageInfo(ctx, admin, second.ID.ID); err != nil || info.HasData || info.DataSize != nil {
		t.Fatalf("refused package: %+v, %v", info, err)
	}
	wantCode(t, upload(second, otaChunkSize/2), 0) // exactly the limit
	third := te.newTestOta(t, admin, "third", "1")
	refused(upload(third, 1))
	if tally.live != limit {
		t.Fatalf("chunks hold %d bytes, want %d", tally.live, limit)
	}

	wantCode(t, te.DeleteOtaPackage(ctx, admin, first.ID.ID), 0)
	wantCode(t, upload(third, otaChunkSize), 0)

	// Another tenant is not concerned; 0 is unlimited.
	other := te.newTenant(t, "other", "other@example.com")
	pkg := te.newTestOta(t, other, "o", "1")
	_, err = te.SaveOtaPackageData(ctx, other, pkg.ID.ID, OtaUpload{ChecksumAlgorithm: "sha256", FileName: "f.bin", Data: bytes.NewReader(make([]byte, 2*otaChunkSize))})
	wantCode(t, err, 0)
	entityLimited(t, te, tp, `{"maxOtaPackagesInBytes":0}`)
	wantCode(t, upload(te.newTestOta(t, admin, "fourth", "1"), 2*otaChunkSize), 0)
}

// TestCapReader: never more than left bytes, whatever the reads ask for; the
// stream ending at left passes.
func TestCapReader(t *testing.T) {
	refuse := errors.New("refused")
	for _, c := range []struct {
		size, left int
		ok         bool
	}{{0, 0, true}, {1, 0, false}, {5, 5, true}, {6, 5, false}, {5000, 4096, false}, {4096, 4096, true}} {
		got, err := io.ReadAll(&capReader{r: iotestHalf{bytes.NewReader(make([]byte, c.size))}, left: int64(c.left), refuse: refuse})
		if c.ok != (err == nil) || (!c.ok && !errors.Is(err, refuse)) || len(got) > c.left || (c.ok && len(got) != c.size) {
			t.Fatalf("%d bytes, %d left: read %d, %v", c.size, c.left, len(got), err)
		}
	}
}

// iotestHalf reads half of what is asked, at least one byte.
type iotestHalf struct{ r io.Reader }

func (h iotestHalf) Read(p []byte) (int, error) { return h.r.Read(p[:max(1, len(p)/2)]) }

func TestDisplaySize(t *testing.T) {
	for n, want := range map[int64]string{0: "0 bytes", 1023: "1023 bytes", 1024: "1 KB", 1536: "1 KB", 10 << 20: "10 MB",
		3<<30 + 5: "3 GB", 1 << 62: "4 EB"} {
		if got := displaySize(n); got != want {
			t.Errorf("displaySize(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestEntityLimitsValidation: the entity limits of a profile must be integers;
// a stored profile whose entity limits do not read keeps its rate limits.
func TestEntityLimitsValidation(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	sys := te.sysadmin(t)
	for conf, want := range map[string]string{
		`{"maxDevices":10,"maxCustomers":0,"maxUsers":null,"maxOtaPackagesInBytes":-1}`: "",
		`{"maxDevices":"10"}`:           "Invalid tenant profile configuration: maxDevices must be a integer, not a string",
		`{"maxOtaPackagesInBytes":1.5}`: "Invalid tenant profile configuration: maxOtaPackagesInBytes must be a integer, not a number",
	} {
		_, err := te.SaveTenantProfile(ctx, sys, &TenantProfile{Name: "p" + itoa64(int64(len(conf))), ProfileData: TenantProfileData{Configuration: json.RawMessage(conf)}})
		if want == "" {
			wantCode(t, err, 0)
		} else if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Fatalf("%s: %v, want %q", conf, err, want)
		}
	}
	l, err := parseEntityLimits(json.RawMessage(`{"maxDevices":10,"maxCustomers":0,"maxUsers":-3,"maxOtaPackagesInBytes":7}`))
	if err != nil || l != (entityLimits{devices: 10, otaBytes: 7}) {
		t.Fatalf("parsed %+v, %v", l, err)
	}
	rl, err := parseLimits(json.RawMessage(`{"transportDeviceMsgRateLimit":"10:1","maxDevices":"x"}`))
	if err != nil || rl.deviceMsg == nil {
		t.Fatalf("rate limits beside a bad entity limit: %+v, %v", rl, err)
	}
}

func itoa64(n int64) string { return strconv.FormatInt(n, 10) }
