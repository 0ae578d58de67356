package main

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/policy"
)

// usageJSON is a row of usage --json: one user's day, or the tenant's
// whole day for an empty user.
type usageJSON struct {
	Day              string  `json:"day"`
	Tenant           string  `json:"tenant"`
	User             string  `json:"user"`
	Steps            int     `json:"steps"`
	InputTokens      int64   `json:"input_tokens"`
	CacheReadTokens  int64   `json:"cache_read_tokens"`
	CacheWriteTokens int64   `json:"cache_write_tokens"`
	OutputTokens     int64   `json:"output_tokens"`
	CostUSD          float64 `json:"cost_usd"`
	SandboxSeconds   float64 `json:"sandbox_seconds"`
}

func (e *env) usageCmd() *cobra.Command {
	var url, tenant, user, day string
	var days int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "usage",
		Short: "Report what tenants and users spent, per day",
		Long: `Reports model turns, tokens, cost (by the policy's price table) and sandbox
seconds per day (UTC), for each tenant and each of its users: what the daily
budgets are checked against.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if tenant != "" {
				if err := event.CheckTenant(tenant); err != nil {
					return &exitError{2, err}
				}
			}
			if days < 1 {
				return &exitError{2, fmt.Errorf("--days %d: want 1 or more", days)}
			}
			if day == "" {
				day = time.Now().UTC().Format(time.DateOnly)
			}
			last, err := time.Parse(time.DateOnly, day)
			if err != nil {
				return &exitError{2, fmt.Errorf("--day %q: want YYYY-MM-DD", day)}
			}
			ctx := cmd.Context()
			nc, js, err := e.connect(url)
			if err != nil {
				return err
			}
			defer nc.Close()
			if err := checkPlatform(ctx, js, url, tenant); err != nil {
				return err
			}
			kept, err := readUsage(ctx, js, tenant)
			if err != nil {
				return fmt.Errorf("usage: %w", err)
			}
			var rows []usageJSON
			for i := days - 1; i >= 0; i-- {
				d := last.AddDate(0, 0, -i).Format(time.DateOnly)
				var ks []string
				for k := range kept {
					if user != "" && k == bus.UsageKey(tenant, d, user) ||
						user == "" && (k == bus.UsageKey(tenant, d, "") || strings.HasPrefix(k, bus.UsageKey(tenant, d, "")+".u.")) {
						ks = append(ks, k)
					}
				}
				slices.Sort(ks)
				for _, k := range ks {
					var u policy.Usage
					if err := json.Unmarshal(kept[k], &u); err != nil {
						return fmt.Errorf("usage %s: %w", k, err)
					}
					parts := strings.SplitN(k, ".", 4)
					r := usageJSON{Day: d, Tenant: parts[0], Steps: u.Steps, InputTokens: u.InputTokens, CacheReadTokens: u.CacheReadTokens,
						CacheWriteTokens: u.CacheWriteTokens, OutputTokens: u.OutputTokens, CostUSD: u.CostUSD, SandboxSeconds: u.SandboxSeconds}
					if len(parts) == 4 {
						b, _ := base64.RawURLEncoding.DecodeString(parts[3])
						r.User = string(b)
					}
					rows = append(rows, r)
				}
			}
			if asJSON {
				return writeJSONLines(e.stdout, rows...)
			}
			if len(rows) == 0 {
				fmt.Fprintln(e.stdout, "No usage recorded for that.")
				return nil
			}
			w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(w, "DAY\tTENANT\tUSER\tSTEPS\tINPUT TOKENS\tCACHE HIT\tOUTPUT TOKENS\tCOST USD\tSANDBOX S\t")
			for _, r := range rows {
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%s\t%d\t%.4f\t%.1f\t\n", r.Day, r.Tenant, cmp.Or(printable(r.User), "(all)"), r.Steps, r.InputTokens,
					cacheHit(policy.Usage{InputTokens: r.InputTokens, CacheReadTokens: r.CacheReadTokens}), r.OutputTokens, r.CostUSD, r.SandboxSeconds)
			}
			return w.Flush()
		},
	}
	cmd.Flags().StringVar(&url, "nats", e.natsURL(), "NATS URL of the platform (CORRAL_NATS_URL)")
	cmd.Flags().StringVar(&tenant, "tenant", cmp.Or(e.getenv("CORRAL_TENANT"), "default"), "the tenant (CORRAL_TENANT)")
	cmd.Flags().StringVar(&user, "user", "", "only this user")
	cmd.Flags().StringVar(&day, "day", "", "the (last) day to report, YYYY-MM-DD in UTC (default: today)")
	cmd.Flags().IntVar(&days, "days", 1, "how many days to report, ending with --day")
	jsonFlag(cmd, &asJSON)
	return cmd
}

// readUsage returns tenant's daily usage keys and their values, read
// through a consumer of the usage bucket's stream filtered to the tenant's
// keys: what a client's credential may read (not the bucket's stream
// information, which would name every tenant's keys).
func readUsage(ctx context.Context, js jetstream.JetStream, tenant string) (map[string][]byte, error) {
	stream, prefix := "KV_"+bus.BucketUsage, "$KV."+bus.BucketUsage+"."
	msgs, err := bus.ReadByConsumer(ctx, js, stream, prefix+tenant+".>", 0)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte)
	for _, m := range msgs {
		k := strings.TrimPrefix(m.Subject, prefix)
		if len(m.Data) == 0 { // a deleted or purged key
			delete(out, k)
			continue
		}
		out[k] = m.Data
	}
	return out, nil
}

// cacheHit is the share of u's input tokens read from the providers'
// prompt caches, as a percentage; "-" with no input.
func cacheHit(u policy.Usage) string {
	if u.InputTokens <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(u.CacheReadTokens)/float64(u.InputTokens))
}
