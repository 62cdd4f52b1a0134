#ifndef SAGAD_VERSION_H
#define SAGAD_VERSION_H

#define SAGAD_VERSION "0.1.0"

#endif
