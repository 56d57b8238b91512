// Package peers owns the completion records of the app containers ("peers")
// and the policy that decides what those records mean for the supervisor.
//
// # Records
//
// A peer reports by writing a record file, <control-dir>/peers/<name>, in
// the volume the containers share. The record is the report: the control
// socket only pokes the supervisor to read the directory again. A
// completion therefore survives every ordering. It may be written before the
// supervisor starts, while the proxy is still starting, or across a restart
// of the proxy container, and the supervisor finds it on its next Load.
//
// Every write is a temp file in the same directory, renamed over <name>. A
// reader sees the old record or the new one, never a torn one. A final
// record is then fsynced, and the directory after it, before the write
// returns, so a crash after the write returns cannot lose it; a running
// record is not fsynced (see put for why neither order costs a promise).
// Temp files are dotfiles, and Load ignores dotfiles.
//
// A client's record also says when its container started (Started, from
// ContainerStarted). After a RestartAllContainers that tells the records
// of the pod's next run, some written before any supervisor of that run
// started, from those the run before left (EarlierRun).
//
// The supervisor creates the directory with mode 01777. Any uid may add a
// record, but the sticky bit lets only a file's owner rename over it or
// remove it, so one peer cannot replace another's report. Load also checks
// that a record names the file it is in, and optionally that its owner is an
// allowed uid.
//
// The sticky bit guards the records, not peers/ itself: in a control dir
// that is not sticky (Istio's emptyDir) any uid can rename peers/ away and
// make its own. So the supervisor holds the directory it created and checked
// (CreateHeld) and every call goes through its descriptor; Replaced says when
// the path names another. Clients hold the one they found owned by a uid
// trusted to be the supervisor's (Hold), and write every record of a run
// through it.
//
// # Claiming a name
//
// Two execs of one name started together must not both run. Checking that
// no exec holds the record and then writing a running record are two
// steps, and the record's lock cannot make them one: every write renames a
// new inode over <name>, so two execs can each lock an inode of their own.
// So Begin first takes an exclusive flock (LOCK_NB: a held name is refused
// at once) on the name's claim file, <control-dir>/peers/.claim.<name>,
// which is never renamed or removed, so every exec of the name locks the
// same inode. It is opened read-only, with O_NOFOLLOW, and refused unless it
// is a regular file; it is created only with O_EXCL, mode 0600, so that no
// other uid can open it to lock it. A claim file of another uid does not
// stop Begin (a *TakenError, see Run.Unclaimed): another uid must not be
// able to hold a Job hostage by taking its name first. The claim is held for
// the whole run and released after the record's lock, by Finish, Abort or
// the death of exec. Load skips claim files, as it skips every dotfile.
//
// # The running record and its lock
//
// exec marks its record running before it starts COMMAND (Begin), so a final
// record left by an earlier run of the same container never ends a later
// run. While COMMAND runs, exec holds an exclusive flock on that record. The
// kubelet can kill the app and exec together (memory.oom.group), and then
// nobody writes a final record. The kernel drops the lock with the process,
// and a running record that nobody holds is how Load tells that exec died:
// it reports the peer as Lost with LostCode, the kubelet's code for a killed
// container.
//
// The protocol leaves no window in which a running record is visible but
// unlocked:
//
//  1. Begin, holding the claim, creates the temp file and takes LOCK_EX on
//     it before the record has a name anyone looks at.
//  2. It writes the running record and renames it to <name>. A lock
//     belongs to the open file, not to the path, so it survives the rename.
//  3. Finish writes the final record the ordinary way (a new inode renamed
//     over <name>), and only then closes the locked file, then the claim.
//
// A reader probes a running record with LOCK_SH|LOCK_NB on its own fresh
// descriptor. Getting the lock means the holder is gone, or that Finish
// renamed a final record over the path between our open and our probe. So
// Load checks that the path still names the inode it locked before it calls
// the peer lost, and reads again otherwise.
//
// # Policy
//
// Policy turns the latest record of each peer into a Verdict, following
// --peers, --restart-policy and --native-sidecar. See Policy.Decide.
package peers
