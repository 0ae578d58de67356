package sandbox

import (
	"encoding/binary"
	"fmt"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// deniedSyscalls fail with EPERM in every sandbox, which bwrap applies
// (--seccomp) just before it starts the executor. They reach kernel
// code that sandboxed tools have no use for and that has often held the
// bugs a local exploit needs (io_uring, userfaultfd, bpf, keyrings,
// perf), or let one process read or steer another (ptrace,
// process_vm_*), or change the mounts, the kernel or the execution
// domain. EPERM rather than a kill, so that a tool that tries one fails
// with "Operation not permitted" and says so.
var deniedSyscalls = []string{
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"userfaultfd",
	"keyctl", "add_key", "request_key",
	"perf_event_open",
	"bpf",
	"ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
	"kexec_load", "kexec_file_load", "reboot",
	"init_module", "finit_module", "delete_module",
	"mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
	"setns", "unshare",
	"open_by_handle_at", "name_to_handle_at",
	"swapon", "swapoff", "acct", "quotactl", "syslog",
	"settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
	"fanotify_init", "lookup_dcookie", "uselib", "vhangup",
	"iopl", "ioperm",
}

// personalities are the execution domains a sandbox may ask for
// (personality(2)): Linux, Linux32, with and without ADDR_NO_RANDOMIZE,
// and the query 0xffffffff, as Docker's default profile allows. The rest
// (READ_IMPLIES_EXEC and other tricks that weaken the process) fail with
// EPERM.
var personalities = []uint64{0x0, 0x8, 0x20000, 0x20008, 0xffffffff}

// seccompProgram returns the sandboxes' seccomp filter as bwrap reads it:
// struct sock_filter entries in native byte order.
func seccompProgram() ([]byte, error) {
	var personality []seccomp.Condition
	for _, p := range personalities {
		personality = append(personality, seccomp.Condition{Argument: 0, Operation: seccomp.NotEqual, Value: p})
	}
	policy := seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{{
			Action: seccomp.ActionErrno, // EPERM
			Names:  deniedSyscalls,
			NamesWithCondtions: []seccomp.NameWithConditions{
				{Name: "personality", Conditions: personality},
			},
		}},
	}
	insns, err := policy.Assemble()
	if err != nil {
		return nil, fmt.Errorf("assemble the seccomp filter: %w", err)
	}
	native, err := arch.GetInfo("")
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	// The library's program lets calls of another architecture through
	// (the 32-bit ABI, through int 0x80 on x86-64, has its own numbers):
	// refuse them all first.
	eperm := uint32(unix.SECCOMP_RET_ERRNO) | uint32(unix.EPERM)
	head := []bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4}, // seccomp_data.arch
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(native.ID), SkipTrue: 1},
		bpf.RetConstant{Val: eperm},
	}
	raw, err := bpf.Assemble(append(head, insns...))
	if err != nil {
		return nil, fmt.Errorf("assemble the seccomp filter: %w", err)
	}
	buf := make([]byte, 0, 8*len(raw))
	for _, r := range raw {
		buf = binary.NativeEndian.AppendUint16(buf, r.Op)
		buf = append(buf, r.Jt, r.Jf)
		buf = binary.NativeEndian.AppendUint32(buf, r.K)
	}
	return buf, nil
}
