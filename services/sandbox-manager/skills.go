package sandboxmanager

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/tool"
)

// skillsDir lays out the tenant's skills, as the memory service last
// published them, in a host directory for new sandboxes to bind at /skills,
// and returns it ("" when the tenant has none). Each published version gets
// its own directory, named by its content, so a sandbox never sees one
// half-written.
func (s *Service) skillsDir(ctx context.Context, tenant string) (string, error) {
	if err := event.CheckTenant(tenant); err != nil {
		return "", err
	}
	rctx, cancel := bus.Bound(ctx)
	defer cancel()
	name := bus.SkillsFiles(tenant)
	info, err := s.skills.GetInfo(rctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("load skills of %s: %w", tenant, err)
	}
	sum := sha256.Sum256([]byte(info.Digest))
	dir := filepath.Join(s.cfg.DataDir, "skills", tenant, hex.EncodeToString(sum[:16]))
	if _, err := os.Stat(dir); err == nil {
		return dir, nil // laid out already
	}
	data, err := s.skills.GetBytes(rctx, name)
	if err != nil {
		return "", fmt.Errorf("load skills of %s: %w", tenant, err)
	}
	var set event.SkillSet
	if err := json.Unmarshal(data, &set); err != nil {
		return "", fmt.Errorf("skills of %s: %w", tenant, err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "tmp-")
	if err != nil {
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			return "", err
		}
		if tmp, err = os.MkdirTemp(filepath.Dir(dir), "tmp-"); err != nil {
			return "", err
		}
	}
	defer os.RemoveAll(tmp) // gone once renamed
	for _, f := range set.Files {
		p, err := tool.MemoryPath(f.Path)
		rel, ok := strings.CutPrefix(p, tool.Skills+"/")
		if err != nil || !ok {
			continue // not a skill file: never written outside the tree
		}
		// A file that cannot be laid out (its path is another file's
		// folder, say) is left out rather than failing every sandbox.
		host := filepath.Join(tmp, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(host), 0o755); err != nil {
			s.log.WarnContext(ctx, "skill file left out", "tenant", tenant, "path", f.Path, "err", err)
			continue
		}
		if err := os.WriteFile(host, []byte(f.Content), 0o644); err != nil {
			s.log.WarnContext(ctx, "skill file left out", "tenant", tenant, "path", f.Path, "err", err)
		}
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil && !errors.Is(err, os.ErrExist) {
		if _, serr := os.Stat(dir); serr != nil {
			return "", err
		}
	}
	return dir, nil
}

// readOnlySkills is added to a Bash result that failed to write to /skills.
const readOnlySkills = "\n[/skills is read-only in the sandbox: to change a skill, use the Write and Edit tools on /skills/<name>/…]"

func noteSkillsWrite(output string) string {
	if strings.Contains(output, "/skills") && strings.Contains(output, "Read-only file system") {
		return output + readOnlySkills
	}
	return output
}
