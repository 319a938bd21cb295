// Where a coordinator keeps its jobs when it is not told (--state-dir), and how that directory is made.
#ifndef LAYERPIPE_COORDINATOR_JOBS_STATE_DIR_H_
#define LAYERPIPE_COORDINATOR_JOBS_STATE_DIR_H_

#include <string>

#include "absl/status/status.h"

namespace layerpipe {

// $LAYERPIPE_STATE_DIR, else $XDG_STATE_HOME/layerpipe, else ~/.local/state/layerpipe (the XDG base
// directory rule; HOME, else the user's passwd entry). Empty variables count as unset. "" only when the
// process has no home at all.
std::string DefaultStateDir();

// Creates `dir` when absent: its parents as the umask gives them, `dir` itself 0700 (it holds every
// client's prompts). An existing directory is left as it is.
absl::Status MakeStateDir(const std::string& dir);

}  // namespace layerpipe

#endif  // LAYERPIPE_COORDINATOR_JOBS_STATE_DIR_H_
